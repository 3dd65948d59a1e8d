#!/bin/bash
# Does a Subformer learn to read its source? A toy reversal task (random sequences of 4-10 of 40
# symbols, target = the source reversed: a model that ignores its source cannot do better than
# a validation nll of about 5 bits), 3-3 layers at width 128, the converged subformer row's
# optimizer and schedule scaled down (lr 5e-4, warm-up 100, 600 updates of 1,024 tokens), one CPU
# thread, about 3 minutes a variant. Prints each variant's validation nll_loss by update.
#   bash lab/results/subformer_toy.sh [VARIANT...]   (default: A B C D F I E)
# A SAFE 64 + the authors' BERT init (the subformer row's setting), B SAFE 64 + fairseq's init,
# C no SAFE (BERT init), D fairseq's transformer, F SAFE 64 + BERT init + learned positions,
# I SAFE 64 + BERT init + 4 SAFE heads (the authors' rule gives r / 64 = 1), E SAFE 64 + BERT init
# for everything but the token table, drawn as fairseq draws it, N(0, r^-1/2), P the paper's
# SAFE width r = 320 with BERT init (the model widened to 384, FFN 768, 6 heads; ~4x slower),
# R SAFE 64 + BERT init + a residual around the SAFE block's FFN without parameters (its input
# zero-padded from r to d), X SAFE 64 + --subformer-init X_INIT (default fairseq; the plugin's
# default, bert-safe-table, is E without the monkeypatch).
# EXTRA: flags appended to every variant (they win: e.g. "--safe-dim 32", or the teacher's
# recipe "--lr 1.5e-3 --adam-betas (0.9,0.98) --dropout 0.3 --weight-decay 1e-4"); TAG: a
# suffix of the variant's log and checkpoint names, so that runs with other EXTRA are kept.
set -eu
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
W=${WORK:-/tmp/lightcompress-subformer-toy}
if [ "${DRY_RUN:-0}" = 1 ]; then  # the plan, nothing run or written
  echo "+ write $W/{train,valid}.{src,tgt} (reversal task) and $W/e_train.py"
  echo "+ $PY -m fairseq_cli.preprocess --source-lang src --target-lang tgt ... --destdir $W/bin"
  variants=${*:-A B C D F I E}
  for v in $variants; do
    echo "+ $PY -m fairseq_cli.train $W/bin ... (variant $v) ${EXTRA:-} --save-dir $W/ck-$v${TAG:-}"
  done
  exit 0
fi
mkdir -p "$W" && cd "$W"
if [ ! -f bin/dict.src.txt ]; then
  "$PY" - <<'PY'
import random
random.seed(0)
vocab = [f"w{i}" for i in range(40)]
for split, n in (("train", 6000), ("valid", 300)):
    with open(f"{split}.src", "w") as fs, open(f"{split}.tgt", "w") as ft:
        for _ in range(n):
            s = [random.choice(vocab) for _ in range(random.randint(4, 10))]
            fs.write(" ".join(s) + "\n")
            ft.write(" ".join(reversed(s)) + "\n")
PY
  "$PY" -m fairseq_cli.preprocess --source-lang src --target-lang tgt --trainpref train \
    --validpref valid --destdir bin --joined-dictionary --workers 1 > preprocess.log 2>&1
fi
# variant E's trainer: fairseq-train with the token table re-drawn after the BERT init
cat > e_train.py <<'PY'
import sys

import torch

import lightcompress.models.subformer as sf

bert_init = sf.bert_init_model_


def bert_but_the_token_table(model):
    bert_init(model)
    emb = model.encoder.embed_tokens  # (shared with the decoder: --share-all-embeddings)
    with torch.no_grad():
        emb.weight.normal_(0, emb.embedding_dim**-0.5)
        emb.weight[emb.padding_idx].zero_()
    return model


sf.bert_init_model_ = bert_but_the_token_table
from fairseq_cli.train import cli_main  # noqa: E402

sys.argv = ["fairseq-train", *sys.argv[1:]]
cli_main()
PY
# variant R's trainer: the SAFE block's FFN gets a residual without parameters (the block's
# input zero-padded from r to d; the authors' block has none, their widths differ)
cat > r_train.py <<'PY'
import sys

import torch.nn.functional as F

import lightcompress.models.subformer_layers as sfl


def padded_residual(self, x, residual):
    if x.size(-1) != residual.size(-1):
        return x + F.pad(residual, (0, x.size(-1) - residual.size(-1)))
    return residual + x


sfl._SafeMixin.residual_connection = padded_residual
from fairseq_cli.train import cli_main  # noqa: E402

sys.argv = ["fairseq-train", *sys.argv[1:]]
cli_main()
PY
COMMON="bin --task translation -s src -t tgt --encoder-layers 3 --decoder-layers 3
 --encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256
 --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings --optimizer adam
 --adam-betas (0.9,0.999) --adam-eps 1e-06 --lr 5e-4 --lr-scheduler inverse_sqrt --warmup-init-lr 1e-07
 --weight-decay 0.01 --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
 --warmup-updates 100 --max-tokens 1024 --max-update ${UPD:-600} --validate-interval-updates 200
 --save-interval-updates 200 --keep-interval-updates 1 --no-epoch-checkpoints --no-progress-bar
 --log-format simple --log-interval 100 --num-workers 0 --seed 1 --user-dir $HERE/lightcompress --cpu"
SF="--arch subformer --subformer-sharing sandwich"
declare -A V=([A]="$SF --safe-dim 64 --subformer-init bert" [B]="$SF --safe-dim 64 --subformer-init fairseq" [C]="$SF --subformer-init bert"
  [D]="--arch transformer" [F]="$SF --safe-dim 64 --subformer-init bert --encoder-learned-pos --decoder-learned-pos"
  [I]="$SF --safe-dim 64 --subformer-init bert --safe-heads 4" [E]="$SF --safe-dim 64 --subformer-init bert"
  [R]="$SF --safe-dim 64 --subformer-init bert" [X]="$SF --safe-dim 64 --subformer-init ${X_INIT:-fairseq}"
  [P]="$SF --safe-dim 320 --subformer-init bert --encoder-embed-dim 384 --decoder-embed-dim 384 --encoder-ffn-embed-dim 768
       --decoder-ffn-embed-dim 768 --encoder-attention-heads 6 --decoder-attention-heads 6")
for k in "${@:-A B C D F I E}"; do
  for v in $k; do
    n="$v${TAG:-}"
    rm -rf "ck-$n"
    case "$v" in
      E) train=("$PY" e_train.py) ;;
      R) train=("$PY" r_train.py) ;;
      *) train=("$PY" -m fairseq_cli.train) ;;
    esac
    OMP_NUM_THREADS=1 PYTHONPATH="$HERE" "${train[@]}" $COMMON ${V[$v]} ${EXTRA:-} --save-dir "ck-$n" > "$n.log" 2>&1
    echo "$n $(grep 'valid on' "$n.log" | sed -E 's/.*nll_loss ([0-9.]+).*num_updates ([0-9]+).*/\2:\1/' | tr '\n' ' ')"
  done
done
