#!/usr/bin/env bash
# Table 5 row 1, IWSLT'14 De-En 12-2 (hypoformer_iwslt_de_en: d 512, d_ff 1024, HTT EMB 0.5/3/4,
# HTT SAN 0.25/3/2, LMF 64): paper 9.8M, 35.2 BLEU, 95 tokens/s on
# the Intel CPU; built: 9.78M (tests/test_hypoformer.py).
# Also Table 4 row 5 ("+ Hypoformer" with KD, 2.3x) and Table 8 De-En Hypoformer.
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 6 gives a set; our choice, dropout 0.1 for 5-20M).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1
hypo_dataset iwslt14
hypo_student_row table5-r1-iwslt14-hypoformer-12-2-d512 --arch hypoformer_iwslt_de_en
