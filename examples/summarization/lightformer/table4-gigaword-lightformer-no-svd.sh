#!/usr/bin/env bash
# LightFormer on GigaWord without SVD weight transfer: Table 4 (13.04M, 37.1 / 18.7 / 34.7).
# Random initialization (no SVD weight transfer), same schedule as the SVD rows.
# INIT=svd converts the dense 18-3 Transformer instead.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/lightformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/lightformer/common.sh"
use_dataset gigaword
MODEL_FLAGS=()
INIT="${INIT:-random}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g6
