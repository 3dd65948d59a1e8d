#!/bin/bash
# Why does the subformer row's encoder collapse? Four 6-6 256-wide trainings from scratch side by
# side on one GPU (the row's data, optimizer and schedule): A the row's Subformer (BERT init, SAFE
# 64, sandwich), B the same with fairseq's init, C without SAFE, D fairseq's transformer.
set -u
if [ "${DRY_RUN:-0}" = 1 ]; then  # the plan, nothing run or written (runs on the device machine)
  echo "+ four fairseq-train runs from scratch side by side (A B C D), then spread.py on each last checkpoint, logs under \$OUT"
  exit 0
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}; UPD=${UPD:-1200}; EVERY=${EVERY:-400}; LIMIT=${LIMIT:-200}; EXTRA=${EXTRA:-}
W=${W:-/tmp/lc}; mkdir -p "$W" "$OUT"
if [ "${SITE:-1}" = 1 ]; then
  mkdir -p "$W/site" && tar -xJf "${CARRY:-.gpu}"/site.tar.xz -C "$W/site" || exit 3
  export PYTHONPATH=$W/site
fi
tar -xJf "${CARRY:-.gpu}"/bin.tar.xz -C "$W" || exit 3
COMMON="--task translation -s de -t en --encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 256
 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
 --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings --optimizer adam
 --adam-betas (0.9,0.999) --adam-eps 1e-06 --lr 5e-4 --lr-scheduler inverse_sqrt --warmup-init-lr 1e-07
 --weight-decay 0.01 --dropout 0.2 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
 --warmup-updates 700 --max-tokens 4096 --max-update $UPD --validate-interval-updates $EVERY
 --save-interval-updates $EVERY --keep-interval-updates 1 --no-epoch-checkpoints --no-progress-bar
 --log-format simple --log-interval 100 --num-workers 0 --seed 1 --user-dir $PWD/lightcompress $EXTRA"
SF="--arch subformer --subformer-sharing sandwich"
declare -A V=( [A]="$SF --safe-dim 64" [B]="$SF --safe-dim 64 --subformer-init fairseq"
               [C]="$SF" [D]="--arch transformer" )
for k in A B C D; do
  timeout "$LIMIT" $PY -m fairseq_cli.train "$W/bin" $COMMON ${V[$k]} --save-dir "$W/$k" > "$OUT/$k.log" 2>&1 &
done
wait
for k in A B C D; do
  grep -E "valid on|\\| train \\|" "$OUT/$k.log" | sed "s/^/$k /" | cut -c1-190
  ck="$W/$k/checkpoint_last.pt"; [ -f "$ck" ] && $PY "${CARRY:-.gpu}"/spread.py "$ck" "$W/bin" "$k" 2>&1 | grep "^spread" | tee -a "$OUT/spread.txt"
done
