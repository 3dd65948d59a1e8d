#!/usr/bin/env bash
# Table 2 SANDWICH 8-8 on WMT'14 En-De: as SANDWICH 6-6 with 8 encoder and 8 decoder layers
# (the shared middle runs 6 times; 38M, 27.7 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row sandwich-8-8 --arch subformer --subformer-sharing sandwich --encoder-layers 8 --decoder-layers 8
