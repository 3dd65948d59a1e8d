#!/usr/bin/env bash
# Table 2 WMT'16 En-Ro "Transformer 12-2 (Our impl.)": the dense Transformer 12-2 with Admin, no KD
# (paper: 64.1M, 34.3 BLEU, 41.5 tokens/s; Table 8: 64.2M, 34.4 BLEU, 1.6x; built: 64.16M).
# This is the sequence-KD teacher of every WMT'16 En-Ro student. Regularisation: 0.1 / 0.1.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hypo_dataset wmt16enro
hypo_admin_transformer_row 12 2
