#!/usr/bin/env bash
# Table 5 row 2, IWSLT'14 De-En 12-1 (hypoformer_iwslt_de_en_row2: d 512, d_ff 1024, HTT EMB
# 0.5/3/4, HTT SAN 0.25/3/2, LMF 64): paper 8.6M, 34.4 BLEU, 140 tokens/s on
# the Intel CPU; built: 8.59M (tests/test_hypoformer.py).
# Also Table 3 De-En Hypoformer 12-1 (8.6M, 34.4, 3.9x Pi, 3.3x Intel).
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 6 gives a set; our choice, dropout 0.1 for 5-20M).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1
hypo_dataset iwslt14
hypo_student_row table5-r2-iwslt14-hypoformer-12-1-d512 --arch hypoformer_iwslt_de_en_row2
