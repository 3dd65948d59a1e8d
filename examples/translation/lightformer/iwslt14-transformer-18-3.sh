#!/usr/bin/env bash
# IWSLT'14 De-En dense Transformer 18-3: Table 6 r2 (52.5M, 34.8 BLEU), and the SVD teacher
# of the 18-3 LightFormer rows (Tables 2, 6, 7, 8).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
lf_dense_row 18 3
