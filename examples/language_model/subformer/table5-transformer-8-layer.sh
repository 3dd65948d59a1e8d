#!/usr/bin/env bash
# Table 5 Transformer (8 Layer) on WikiText-103: transformer_lm_wiki103 with 8 layers and the same
# schedule (146M, 22.32 test perplexity at context 480).
# Data: ./prepare-wikitext-103.sh. Schedule (8 GPUs x 1536 tokens x update-freq 3, nag, cosine)
# and evaluation (fairseq-eval-lm): ../../translation/subformer/common.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/subformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/subformer/common.sh"
sf_lm
sf_lm_row transformer-8-layer --arch transformer_lm_wiki103 --decoder-layers 8
