#!/usr/bin/env bash
# LightFormer 18-3 on WMT'16 En-Ro without SVD weight transfer: Table 3 (15.3M, 33.9 BLEU).
# Random initialization (no SVD weight transfer), same schedule as the SVD rows.
# INIT=svd converts the dense 18-3 Transformer instead.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset wmt16enro
MODEL_FLAGS=()
INIT="${INIT:-random}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g6
