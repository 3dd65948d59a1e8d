#!/usr/bin/env bash
# Table 7, LightFormer 24-3 on IWSLT'14 De-En, 6 shared encoder groups (paper: 7.7M,
# 1.8x speed, 34.6 BLEU). The 18-3 row is table2-iwslt14-lightformer.sh.
# The teacher has the student's depth, as the converter requires (encoder depth = the
# student's layers or its groups); the paper does not say which teacher it used.
# SVD weight transfer from the dense 24-3 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
MODEL_FLAGS=(--encoder-layers 24 --decoder-layers 3)
INIT="${INIT:-svd}"
TEACHER_E=24 TEACHER_D=3
lf_row lightformer-24-3-g6
