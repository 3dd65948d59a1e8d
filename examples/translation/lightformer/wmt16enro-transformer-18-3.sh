#!/usr/bin/env bash
# WMT'16 En-Ro dense Transformer-base 18-3: the SVD teacher of the En-Ro LightFormer
# (not a paper row).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset wmt16enro
lf_dense_row 18 3
