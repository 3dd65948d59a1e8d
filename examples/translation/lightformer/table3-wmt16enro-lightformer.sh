#!/usr/bin/env bash
# LightFormer 18-3 on WMT'16 En-Ro (lightformer_wmt_en_ro): Table 3 (15.3M, 34.3 BLEU, 1.8x).
# SVD weight transfer from the dense 18-3 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset wmt16enro
MODEL_FLAGS=()
INIT="${INIT:-svd}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g6
