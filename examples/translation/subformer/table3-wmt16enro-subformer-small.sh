#!/usr/bin/env bash
# Table 3 SUBFORMER-SMALL on WMT'16 En-Ro (subformer_wmt_en_ro_small: d 320, d_s 512, d_e 192,
# 6-6; paper 20M, 34.1 BLEU; these widths give 20.8M).
# Schedule: ./common.sh (8 GPUs x 8192 tokens x update-freq 2; UPDATE_FREQ keeps it on fewer).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sf_mt wmt16enro base
sf_mt_row subformer-small --arch subformer_wmt_en_ro_small
