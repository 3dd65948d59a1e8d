#!/usr/bin/env bash
# Table 2 SANDWICH 6-6 on WMT'14 En-De (= Table 3 "Only SANDWICH"): Transformer-base widths,
# the middle layers 2..5 share weights, first and last independent, no SAFE (38M, 27.3 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row sandwich-6-6 --arch subformer --subformer-sharing sandwich
