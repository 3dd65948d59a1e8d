#!/usr/bin/env bash
# Table 8, LightFormer 6-6 with 3 shared encoder group(s) on IWSLT'14 De-En
# (paper: 6.9M, 34.4 BLEU). The 18-3 / 6-group row is table2-iwslt14-lightformer.sh.
# SVD weight transfer from the dense 6-6 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
MODEL_FLAGS=(--encoder-layers 6 --decoder-layers 6 --lc-encoder-groups 3)
INIT="${INIT:-svd}"
TEACHER_E=6 TEACHER_D=6
lf_row lightformer-6-6-g3
