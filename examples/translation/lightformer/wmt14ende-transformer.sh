#!/usr/bin/env bash
# WMT'14 En-De Transformer base 6-6 (transformer_wmt_en_de, shared embeddings): Table 2
# (63.2M, 27.3 BLEU). Paper batch: 8 GPUs x 4096 tokens (UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset wmt14ende
lf_dense_row 6 6
