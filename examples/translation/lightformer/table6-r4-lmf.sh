#!/usr/bin/env bash
# Table 6 r4: LMF 18-3 without sharing (lightformer_iwslt_de_en_lmf; paper: 14.6M, 33.9 BLEU).
# Trained from scratch (r6 is the row that adds SVD weight transfer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
ARCH=lightformer_iwslt_de_en_lmf
MODEL_FLAGS=()
INIT="${INIT:-random}"
TEACHER_E=18 TEACHER_D=3
lf_row lmf-18-3
