#!/usr/bin/env bash
# Table 2 WMT'14 En-De "Transformer 12-2 (Our impl.)": the dense Transformer 12-2 with Admin, no KD
# (paper: 64.9M, 28.7 BLEU, 41.5 tokens/s; Table 8: 65.3M, 28.3 BLEU, 1.5x; built: 65.32M).
# This is the sequence-KD teacher of every WMT'14 En-De student. Regularisation: 0.1 / 0.1.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hypo_dataset wmt14ende
hypo_admin_transformer_row 12 2
