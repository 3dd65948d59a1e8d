#!/usr/bin/env bash
# Table 3 (and Table 2) TRANSFORMER-BASE (our reimpl.) on WMT'14 En-De: the subformer
# architecture without sharing or SAFE is Transformer-base with shared embeddings, BERT
# initialisation and the Subformer schedule (61M, 27.7 BLEU).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende base
sf_mt_row transformer-base --arch subformer --subformer-sharing none
