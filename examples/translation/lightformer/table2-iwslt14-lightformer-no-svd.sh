#!/usr/bin/env bash
# LightFormer 18-3 on IWSLT'14 De-En without SVD weight transfer: Table 2 'w/o SVD WT'
# (7.7M, 34.0 BLEU) = Table 6 r5 (LMF & weight sharing, 34.0).
# Random initialization (no SVD weight transfer), same schedule as the SVD rows.
# INIT=svd converts the dense 18-3 Transformer instead.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
MODEL_FLAGS=()
INIT="${INIT:-random}"
TEACHER_E=18 TEACHER_D=3
lf_row lightformer-18-3-g6
