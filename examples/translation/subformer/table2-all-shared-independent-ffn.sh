#!/usr/bin/env bash
# Table 2 All-Shared (Independent FFN) on WMT'14 En-De: all layers shared, plus an unshared
# d x d map after each layer's FFN, as the authors' --add-independent-layer (27M, 22.4 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row all-shared-independent-ffn --arch subformer --subformer-sharing all-independent-ffn
