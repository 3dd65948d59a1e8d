#!/usr/bin/env bash
# Table 3 SUBFORMER-BASE on WMT'14 En-De (subformer_base: d 512, d_s 1024, sandwich FFN 3072,
# d_e 320, 6-6; 52M, 28.1 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row subformer-base --arch subformer_base
