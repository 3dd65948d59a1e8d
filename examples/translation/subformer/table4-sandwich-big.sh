#!/usr/bin/env bash
# Table 4 SANDWICH-BIG on WMT'14 En-De (sandwich_big: Transformer-big widths, sandwich sharing,
# no SAFE; 122M, 28.6 BLEU).
# Schedule: ./common.sh, big models: 16 GPUs x 4096 tokens x update-freq 2, dropout 0.3.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende big
sf_mt_row sandwich-big --arch sandwich_big
