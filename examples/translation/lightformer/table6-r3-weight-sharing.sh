#!/usr/bin/env bash
# Table 6 r3: dense 18-3 Transformer with weight sharing, 9 unique encoder layers
# (lightformer_iwslt_de_en_sharing; paper: 33.6M, 34.6 BLEU). Trained from scratch.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
ARCH=lightformer_iwslt_de_en_sharing
MODEL_FLAGS=()
INIT="${INIT:-random}"
TEACHER_E=18 TEACHER_D=3
lf_row sharing-18-3-g9
