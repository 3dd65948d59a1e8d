#!/usr/bin/env bash
# Table 5 row 6, WMT'14 En-De 12-2 (hypoformer_wmt_en_de: d 512, d_ff 2048, HTT EMB 0.25/3/16, HTT
# SAN 0.5/2/4, LMF 128): paper 21.3M, 27.5 BLEU, 42 tokens/s on
# the Intel CPU; built: 21.28M (tests/test_hypoformer.py).
# Also Table 2 En-De base Hypoformer (21.2M, 27.5, 42.0 tokens/s), Table 3 En-De Hypoformer 12-2
# (21.2M, 27.5, 1.5x Pi, 1.6x Intel) and Table 8.
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 7 gives a set; our choice, dropout and label smoothing 0.1 for models of
# 13M and more).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1 ROW_LABEL_SMOOTHING=0.1
hypo_dataset wmt14ende
hypo_student_row table5-r6-wmt14ende-hypoformer-12-2-d512 --arch hypoformer_wmt_en_de
