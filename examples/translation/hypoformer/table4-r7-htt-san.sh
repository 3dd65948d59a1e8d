#!/usr/bin/env bash
# Table 4 row 7 "+ HTT SAN": the 12-2 Admin Transformer with only the self-attention compressed
# (fused Q/K/V as HTT, beta 0.25, 3 cores, TT-ranks 2, no output projection: Table 5 row 1's
# HTT SAN), dense embedding, FFN and cross-attention, with KD (paper: 21.7M / 24.3M, 35.5 BLEU,
# 2.1x; built: 24.30M at V = 10,152, which matches the printed #Total; the printed #Params is
# #Total minus an HTT, not a dense, embedding).
# Pipeline: the 12-2 Admin teacher (trained and tested first unless TEACHER=path), its SKD
# data (scripts/distill_data.sh), then this student on ground truth + SKD data.
# Regularisation (Table 6 gives a set; our choice, dropout 0.2 for models above 20M): dropout 0.2.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROW_DROPOUT=0.2
hypo_dataset iwslt14
hypo_student_row table4-r7-htt-san --arch hypoformer "${WIDTH_FLAGS[@]}" \
  --encoder-layers 12 --decoder-layers 2 --hypo-embed dense \
  --hypo-self-attn htt --hypo-attn-alpha 0.25 --hypo-attn-cores 3 --hypo-attn-rank 2 \
  --hypo-ffn dense --hypo-cross-attn dense
