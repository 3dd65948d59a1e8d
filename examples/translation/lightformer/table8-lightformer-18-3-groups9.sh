#!/usr/bin/env bash
# Table 8, LightFormer 18-3 with 9 shared encoder group(s) on IWSLT'14 De-En
# (paper: 9.4M, 34.7 BLEU). The 18-3 / 6-group row is table2-iwslt14-lightformer.sh.
# SVD weight transfer from the dense 18-3 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
MODEL_FLAGS=(--lc-encoder-groups 9)
INIT="${INIT:-svd}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g9
