#!/usr/bin/env bash
# DA-WID on IWSLT'14 De-En: the dense post-LN 6-6 Transformer (transformer_iwslt_de_en, 36.8M
# with shared embeddings) compressed by weight-inherited distillation with data-aware
# compactors and learned masks, fused into an ordinary smaller fairseq model (dawid_fused),
# then tested (BLEU) and timed beside the teacher (and a LightFormer of the same size when
# LIGHTFORMER=path). The paper (Table 1) compresses BERT-base on GLUE; this row brings the method
# to translation, so its schedule is ours (common.sh lists it and every override).
#
# Data: examples/translation/lightformer/prepare-iwslt14.sh (fairseq's IWSLT'14 steps, 10k joint
# BPE, joined dictionary). DRY_RUN=1 prints the pipeline.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
masks="${DAWID_MASKS:-dim,head,layer}"
dawid_row "dawid-${DAWID_INIT:-data-aware}-t${TARGET_SPARSITY:-0.8}-${masks//,/+}"
