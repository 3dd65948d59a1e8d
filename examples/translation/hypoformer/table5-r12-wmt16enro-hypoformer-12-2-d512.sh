#!/usr/bin/env bash
# Table 5 row 12, WMT'16 En-Ro 12-2 (hypoformer_wmt_en_ro: d 512, d_ff 2048, HTT EMB 0.125/3/32,
# HTT SAN 0.25/3/4, LMF 96): paper 13.9M, 34.3 BLEU, 44 tokens/s on
# the Intel CPU; built: 13.87M (tests/test_hypoformer.py).
# Also Table 2 En-Ro base Hypoformer (13.9M, 34.3, 44.0 tokens/s), Table 3 En-Ro Hypoformer 12-2
# (13.9M, 34.3, 3.0x Pi, 1.9x Intel) and Table 8.
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 7 gives a set; our choice, dropout and label smoothing 0.1 for models of
# 13M and more).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1 ROW_LABEL_SMOOTHING=0.1
hypo_dataset wmt16enro
hypo_student_row table5-r12-wmt16enro-hypoformer-12-2-d512 --arch hypoformer_wmt_en_ro
