#!/usr/bin/env bash
# LightFormer 18-3 on IWSLT'14 De-En, 6 shared encoder groups, rank 80, embedding rank 135
# (the defaults of lightformer_iwslt_de_en): Table 2 (7.7M, 34.6 BLEU, 2.1x), Table 6 r6,
# Table 7 18-3 and Table 8 18-3 / 6 groups.
# SVD weight transfer from the dense 18-3 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
MODEL_FLAGS=()
INIT="${INIT:-svd}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g6
