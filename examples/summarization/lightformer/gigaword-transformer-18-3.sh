#!/usr/bin/env bash
# GigaWord dense Transformer-base 18-3: the SVD teacher of the GigaWord LightFormer
# (not a paper row).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/lightformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/lightformer/common.sh"
use_dataset gigaword
lf_dense_row 18 3
