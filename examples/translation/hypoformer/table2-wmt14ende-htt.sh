#!/usr/bin/env bash
# Table 2, WMT'14 En-De: Base HTT Transformer: Hypoformer with an HTT FFN (0.25, 2 cores, TT-ranks
# 4) instead of LMF
# (hypoformer_wmt_en_de_htt; the paper gives no settings for the decomposition baselines:
# see lightcompress/models/hypoformer.py). Paper: 19.4M, 26.5 BLEU, 29.3 tokens/s on the
# Intel CPU; built: 19.68M.
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 7 gives a set; our choice, dropout and label smoothing 0.1 for models of
# 13M and more).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1 ROW_LABEL_SMOOTHING=0.1
hypo_dataset wmt14ende
hypo_student_row table2-htt --arch hypoformer_wmt_en_de_htt
