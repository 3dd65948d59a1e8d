#!/usr/bin/env bash
# Table 3 SUBFORMER-BASE on WMT'16 En-Ro (subformer_wmt_en_ro_base: d 512, d_s 640, d_e 384,
# 6-6; paper 48M, 34.7 BLEU; the printed widths give 43.1M).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt16enro base
sf_mt_row subformer-base --arch subformer_wmt_en_ro_base
