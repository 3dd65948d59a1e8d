#!/usr/bin/env bash
# Table 4 row 3 "+ 12-2" (Table 8 De-En 12-2): the dense Transformer 12-2 with Admin, no KD
# (paper: 36.8M, 35.4 BLEU, 1.9x). This is the sequence-KD teacher of every De-En student.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hypo_dataset iwslt14
hypo_admin_transformer_row 12 2
