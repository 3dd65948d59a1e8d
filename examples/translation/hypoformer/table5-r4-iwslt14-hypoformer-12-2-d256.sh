#!/usr/bin/env bash
# Table 5 row 4, IWSLT'14 De-En 12-2 (hypoformer_iwslt_de_en_row4: d 256, d_ff 1024, HTT EMB
# 0.5/3/4, HTT SAN 0.25/3/4, LMF 32): paper 3.6M, 33.4 BLEU, 158 tokens/s on
# the Intel CPU; built: 3.60M (tests/test_hypoformer.py).
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 6 gives a set; our choice, dropout 0.05 below 5M).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.05
hypo_dataset iwslt14
hypo_student_row table5-r4-iwslt14-hypoformer-12-2-d256 --arch hypoformer_iwslt_de_en_row4
