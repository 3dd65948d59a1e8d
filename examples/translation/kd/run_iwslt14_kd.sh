#!/usr/bin/env bash
# Hypoformer's sequence-level KD procedure on IWSLT'14 De-En (Sec. 5.2, Table 6):
#   1. train a 12-2 Transformer teacher on the ground truth;
#   2. translate the training set with it (beam 5, lenpen 1.0) -> SKD data (scripts/distill_data.sh);
#   3. train the student on ground truth + SKD data together (--task translation_seqkd
#      --kd-data-mode both);
#   4. evaluate teacher and student: beam 5, lenpen 1.0, tokenized BLEU after --remove-bpe, on
#      the checkpoint with the lowest validation loss (checkpoint_best.pt).
# A row script on the shared recipe library (examples/common/lib.sh, through ./common.sh): it
# checks the tools and the data first, skips a training run that finished before
# (train.done), and DRY_RUN=1 prints the commands instead of running them.
#
# Data: DATA_BIN must hold IWSLT'14 De-En as fairseq's examples/translation/prepare-iwslt14.sh
# builds it (Moses tokenized, lowercased, 10k joint BPE), binarized with --joined-dictionary;
# examples/translation/lightformer/prepare-iwslt14.sh does exactly this.
#
# Environment (all optional):
#   DATA_BIN        binarized IWSLT'14     (default: $DATA_ROOT/iwslt14.tokenized.de-en, DATA_ROOT
#                   defaulting to data-bin)
#   SAVE_ROOT       checkpoints and outputs       (default: checkpoints/iwslt14-kd)
#   KD_BIN          the distilled train split     (default: $DATA_BIN.kd-12-2)
#   ARCH            student architecture          (default: transformer_iwslt_de_en)
#   TEACHER_ARGS    teacher flags                 (default: --encoder-layers 12 --decoder-layers 2)
#   DISTILL_GENERATE_ARGS  more fairseq-generate flags for the distillation, one string
#                   (e.g. '--max-len-a 1.2 --max-len-b 10')
#   STUDENT_ARGS    extra student flags (e.g. layer counts, dims of a Hypoformer configuration)
#                                                 (default: --encoder-layers 12 --decoder-layers 2)
#   TEACHER_UPDATES / STUDENT_UPDATES  max updates (default: 20000 / 20000, Table 6)
#   MAX_TOKENS      tokens per batch              (default: 4096, Table 6)
#   DROPOUT         dropout of both models        (default: 0.1; Table 6 searches 0.05/0.1/0.2)
#   BEAM, LENPEN    decoding                      (default: 5 / 1.0)
#   DISTILL_MAX_TOKENS, NUM_SHARDS  distillation batching / resumable shards (default: 8192 / 8)
#   CPU=1           train and translate on CPU (slow; for trying the pipeline)
#   FP16=1          mixed precision (Table 6 trains in fp16 on one GPU)
#   PYTHON, USER_DIR, DRY_RUN   as in examples/common/lib.sh (default: python, else python3; the
#                   folder `python -m lightcompress --user-dir` prints)
#
# Deviations from Table 6: fairseq has no RAdam, so Adam (0.9, 0.98) is used with the same
# schedule (inverse sqrt, 6000 warmup updates from 1e-7 to 7e-4); the Admin initialization belongs
# to the Hypoformer model (ARCH=hypoformer_iwslt_de_en, --admin-init in STUDENT_ARGS). Embeddings are
# shared (joined dictionary), as in the papers' 36.8M-parameter transformer_iwslt_de_en.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kd_iwslt14
kd_row
