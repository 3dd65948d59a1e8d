#!/usr/bin/env bash
# Table 3 Only SAFE, d_e = 256 on WMT'14 En-De (subformer_only_safe: Transformer-base with
# SAFE embeddings, no sharing; 54M, 27.6 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row only-safe --arch subformer_only_safe
