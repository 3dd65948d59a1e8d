#!/usr/bin/env bash
# Table 4 row 6 "+ HTT EMB": the 12-2 Admin Transformer with only the embedding compressed (HTT,
# alpha 0.5, 3 cores, TT-ranks 4, as Table 5 row 1), with KD (paper: 31.6M / 34.2M, 36.0 BLEU,
# 2.0x; built: 34.16M at V = 10,152).
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 6 gives a set; our choice, dropout 0.2 for models above 20M): dropout 0.2.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.2
hypo_dataset iwslt14
hypo_student_row table4-r6-htt-emb --arch hypoformer "${WIDTH_FLAGS[@]}" \
  --encoder-layers 12 --decoder-layers 2 \
  --hypo-embed htt --hypo-embed-alpha 0.5 --hypo-embed-cores 3 --hypo-embed-rank 4 \
  --hypo-self-attn dense --hypo-attn-out-proj --hypo-ffn dense --hypo-cross-attn dense
