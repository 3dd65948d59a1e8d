#!/usr/bin/env bash
# Table 4 row 1 / Table 3 De-En "Transformer": fairseq's transformer_iwslt_de_en 6-6, no Admin,
# no KD (paper: 36.8M, 34.5 BLEU, speed 1.0x). Also the speedup baseline of every De-En row
# (hypo_speed times the other rows against its checkpoint). Dropout: the teacher's (0.2).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hypo_dataset iwslt14
hypo_transformer_row 6 6
