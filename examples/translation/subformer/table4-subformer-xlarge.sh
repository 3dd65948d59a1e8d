#!/usr/bin/env bash
# Table 4 SUBFORMER-XLARGE on WMT'14 En-De (subformer_xlarge: d 1024, d_s 2048, d_e 512, 6-6;
# 197M, 29.3 BLEU).
# Schedule: ./common.sh, big models: 16 GPUs x 4096 tokens x update-freq 2, dropout 0.3.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt14ende big
sf_mt_row subformer-xlarge --arch subformer_xlarge
