#!/usr/bin/env bash
# Table 2, WMT'16 En-Ro: Base HMF Transformer: HTT EMB (0.25/3/16), self-attention HMF (0.5, rank
# 16), FFN HMF (0.25, rank 16)
# (hypoformer_wmt_en_ro_hmf; the paper gives no settings for the decomposition baselines:
# see lightcompress/models/hypoformer.py). Paper: 20.8M, 34.4 BLEU, 41.1 tokens/s on the
# Intel CPU; built: 20.37M.
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 7 gives a set; our choice, dropout and label smoothing 0.1 for models of
# 13M and more).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.1 ROW_LABEL_SMOOTHING=0.1
hypo_dataset wmt16enro
hypo_student_row table2-hmf --arch hypoformer_wmt_en_ro_hmf
