#!/usr/bin/env bash
# Table 4 TRANSFORMER-BIG (our reimpl.) on WMT'14 En-De: Transformer-big widths without sharing
# (sandwich_big with --subformer-sharing none; BERT initialisation; 209M, paper 210M, 28.6 BLEU).
# Schedule: ./common.sh, big models: 16 GPUs x 4096 tokens x update-freq 2, dropout 0.3.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende big
sf_mt_row transformer-big --arch sandwich_big --subformer-sharing none
