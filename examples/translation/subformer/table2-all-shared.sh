#!/usr/bin/env bash
# Table 2 All-Shared on WMT'14 En-De: Transformer-base widths, every encoder layer and every
# decoder layer share one set of weights (24M, 14.3 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row all-shared --arch subformer --subformer-sharing all
