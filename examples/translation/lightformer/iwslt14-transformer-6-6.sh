#!/usr/bin/env bash
# IWSLT'14 De-En Transformer 6-6 (transformer_iwslt_de_en, shared embeddings): the baseline of
# Table 1 (36.8M, 34.6 BLEU), Table 2 (36.8M, 34.5), Table 6 r1 and Table 7 (34.5).
# Also the SVD teacher of the 6-6 LightFormer rows (Tables 7 and 8).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
lf_dense_row 6 6
