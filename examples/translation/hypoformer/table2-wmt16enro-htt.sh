#!/usr/bin/env bash
# Table 2, WMT'16 En-Ro: Base HTT Transformer: Hypoformer with an HTT FFN (0.25, 2 cores, TT-ranks
# 4) instead of LMF
# (hypoformer_wmt_en_ro_htt; the paper gives no settings for the decomposition baselines:
# see lightcompress/models/hypoformer.py). Paper: 19.2M, 34.3 BLEU, 31.0 tokens/s on the
# Intel CPU; built: 19.38M.
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 7 gives a set; our choice, dropout and label smoothing 0.1 for models of
# 13M and more).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1 ROW_LABEL_SMOOTHING=0.1
hypo_dataset wmt16enro
hypo_student_row table2-htt --arch hypoformer_wmt_en_ro_htt
