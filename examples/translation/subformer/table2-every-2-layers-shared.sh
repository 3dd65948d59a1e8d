#!/usr/bin/env bash
# Table 2 Every 2 layers shared on WMT'14 En-De: layers [1,2], [3,4], [5,6] share weights
# (38M, 27.2 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row every-2-layers-shared --arch subformer --subformer-sharing every-2
