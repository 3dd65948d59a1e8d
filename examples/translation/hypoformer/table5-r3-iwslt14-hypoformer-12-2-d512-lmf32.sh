#!/usr/bin/env bash
# Table 5 row 3, IWSLT'14 De-En 12-2 (hypoformer_iwslt_de_en_row3: d 512, d_ff 1024, HTT EMB
# 0.5/3/4, HTT SAN 0.25/3/2, LMF 32): paper 8.4M, 34.8 BLEU, 112 tokens/s on
# the Intel CPU; built: 8.41M (tests/test_hypoformer.py).
# Also Table 3 De-En Hypoformer 12-2 (8.4M, 34.8, 3.5x Pi, 2.7x Intel).
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 6 gives a set; our choice, dropout 0.1 for 5-20M).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1
hypo_dataset iwslt14
hypo_student_row table5-r3-iwslt14-hypoformer-12-2-d512-lmf32 --arch hypoformer_iwslt_de_en_row3
