#!/usr/bin/env bash
# Table 7, LightFormer 18-2 on IWSLT'14 De-En, 6 shared encoder groups (paper: 6.7M,
# 2.4x speed, 34.2 BLEU). The 18-3 row is table2-iwslt14-lightformer.sh.
# The teacher has the student's depth, as the converter requires (encoder depth = the
# student's layers or its groups); the paper does not say which teacher it used.
# SVD weight transfer from the dense 18-2 Transformer (trained first unless
# its checkpoint exists, or TEACHER=path), then training with the same schedule.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
MODEL_FLAGS=(--encoder-layers 18 --decoder-layers 2)
INIT="${INIT:-svd}"
TEACHER_E=18 TEACHER_D=2
lf_row lightformer-18-2-g6
