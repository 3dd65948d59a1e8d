#!/usr/bin/env bash
# Table 3 TRANSFORMER (our reimpl.) on WMT'16 En-Ro: Transformer-base (the subformer
# architecture without sharing or SAFE, BERT initialisation; 62M, 34.1 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt16enro base
sf_mt_row transformer-base --arch subformer --subformer-sharing none
