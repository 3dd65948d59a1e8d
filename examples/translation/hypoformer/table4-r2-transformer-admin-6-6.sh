#!/usr/bin/env bash
# Table 4 row 2 "+ Admin" (Table 8 De-En 6-6): the dense Transformer 6-6 with Admin, no KD
# (paper: 36.8M, 34.9 BLEU, 1.0x). Dropout: the teacher's (0.2).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hypo_dataset iwslt14
hypo_admin_transformer_row 6 6
