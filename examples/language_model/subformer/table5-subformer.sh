#!/usr/bin/env bash
# Table 5 SUBFORMER on WikiText-103 (subformer_lm_wiki103: transformer_lm decoder, d 768 (FFN
# 4096), sandwich d_s 2048 (FFN 6144), 12 layers, adaptive input and softmax; 96M, 20.39 test
# perplexity at context length 480).
# Data: ./prepare-wikitext-103.sh. Schedule (8 GPUs x 1536 tokens x update-freq 3, nag, cosine)
# and evaluation (fairseq-eval-lm): ../../translation/subformer/common.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/subformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/subformer/common.sh"
sf_lm
sf_lm_row subformer --arch subformer_lm_wiki103
