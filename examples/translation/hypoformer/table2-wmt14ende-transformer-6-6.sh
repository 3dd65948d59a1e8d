#!/usr/bin/env bash
# Table 2 / Table 3 WMT'14 En-De "Transformer" (Vaswani et al.) 6-6: fairseq's
# transformer_wmt_en_de,
# no Admin, no KD (paper: 61.0M, 27.3 BLEU, 26.3 tokens/s; built: 63.20M). The paper quotes its
# BLEU from the literature; here it is trained with the Table 7 schedule. Also the speedup
# baseline of every WMT'14 En-De row. Regularisation: the teacher's (0.1 / 0.1).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hypo_dataset wmt14ende
hypo_transformer_row 6 6
