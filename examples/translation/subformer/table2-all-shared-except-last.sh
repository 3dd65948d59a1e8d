#!/usr/bin/env bash
# Table 2 All-Shared (except last) on WMT'14 En-De: layers 1..L-1 shared, layer L independent
# (31M, 23.2 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row all-shared-except-last --arch subformer --subformer-sharing all-except-last
