#!/usr/bin/env bash
# Table 3 SUBFORMER-MID on WMT'14 En-De (subformer_mid: d = d_s = 768, d_e 350, 6-6;
# 63M, 28.5 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row subformer-mid --arch subformer_mid
