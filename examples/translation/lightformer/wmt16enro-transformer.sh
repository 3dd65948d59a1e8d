#!/usr/bin/env bash
# WMT'16 En-Ro Transformer base 6-6 (transformer_wmt_en_de dims, shared embeddings):
# Table 3 (62M, 34.4 BLEU).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset wmt16enro
lf_dense_row 6 6
