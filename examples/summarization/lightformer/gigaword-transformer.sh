#!/usr/bin/env bash
# GigaWord Transformer base 6-6 (transformer_wmt_en_de dims, shared embeddings): Table 4
# (51.28M, ROUGE-1/2/L 37.5 / 18.9 / 34.7).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/lightformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/lightformer/common.sh"
use_dataset gigaword
lf_dense_row 6 6
