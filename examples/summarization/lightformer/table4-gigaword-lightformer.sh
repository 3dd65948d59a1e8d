#!/usr/bin/env bash
# LightFormer on GigaWord (lightformer_gigaword): Table 4 (13.04M, ROUGE 37.5 / 19.2 / 35.0).
# SVD weight transfer from the dense 18-3 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/lightformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/lightformer/common.sh"
use_dataset gigaword
MODEL_FLAGS=()
INIT="${INIT:-svd}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g6
