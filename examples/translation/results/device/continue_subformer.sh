#!/bin/bash
# The converged plan's subformer row, continued on the device machine from its CPU checkpoint
# (same fairseq-train arguments as converged.py's, without --cpu), stopped by fairseq's own
# --stop-time-hours (it validates and saves when it stops), state packed back under $OUT.
set -u -o pipefail
if [ "${DRY_RUN:-0}" = 1 ]; then  # the plan, nothing run or written (runs on the device machine)
  echo "+ unpack the carried state, fairseq-train (the subformer row's arguments, no --cpu) until --stop-time-hours, pack the last and best checkpoints under \$OUT"
  exit 0
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
SECS=${SECS:-450}
EXTRA=${EXTRA:-}
W=${W:-/tmp/lc}
mkdir -p "$W/save" "$OUT"
if [ "${SITE:-1}" = 1 ]; then
  mkdir -p "$W/site" && tar -xJf "${CARRY:-.gpu}"/site.tar.xz -C "$W/site" || exit 3
  export PYTHONPATH=$W/site
fi
tar -xJf "${CARRY:-.gpu}"/bin.tar.xz -C "$W" || exit 3
(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true) | tee "$OUT/train-gpu.log"
$PY "${CARRY:-.gpu}"/pack.py unpack "${CARRY:-.gpu}"/state/sub "$W/save/checkpoint_last.pt" || exit 4
STOP=$($PY -c "
import torch,sys
st=torch.load('$W/save/checkpoint_last.pt',map_location='cpu',weights_only=False)
print((st['extra_state']['previous_training_time']+$SECS)/3600)") || exit 5
echo "stop-time-hours $STOP" | tee -a "$OUT/train-gpu.log"
$PY -m fairseq_cli.train "$W/bin" --user-dir "$PWD/lightcompress" --task translation -s de -t en \
  --arch subformer --encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 256 --decoder-embed-dim 256 \
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4 \
  --decoder-attention-heads 4 --subformer-sharing sandwich --safe-dim 64 --share-all-embeddings \
  --optimizer adam --adam-betas '(0.9, 0.999)' --adam-eps 1e-06 --lr 5e-4 --lr-scheduler inverse_sqrt \
  --warmup-init-lr 1e-07 --weight-decay 0.01 --dropout 0.2 --criterion label_smoothed_cross_entropy \
  --label-smoothing 0.1 --warmup-updates 700 --max-tokens 4096 --max-update 7000 \
  --validate-interval-updates 500 --save-interval-updates 500 --keep-interval-updates 1 \
  --no-epoch-checkpoints --patience 4 --save-dir "$W/save" --no-progress-bar --log-format simple \
  --log-interval 50 --num-workers 0 --seed 1 --stop-time-hours "$STOP" $EXTRA 2>&1 | tee -a "$OUT/train-gpu.log"
echo "fairseq-train exit ${PIPESTATUS[0]}" | tee -a "$OUT/train-gpu.log"
ls -la "$W/save" | tee -a "$OUT/train-gpu.log"
upd() { $PY -c "
import torch
st=torch.load('$1',map_location='cpu',weights_only=False)
print(st['optimizer_history'][-1]['num_updates'])"; }
LAST=$(upd "$W/save/checkpoint_last.pt")
BEST=none
[ -f "$W/save/checkpoint_best.pt" ] && BEST=$(upd "$W/save/checkpoint_best.pt")
echo "last $LAST best $BEST" | tee -a "$OUT/train-gpu.log"
if [ "$BEST" = none ] || [ "$BEST" = "$LAST" ]; then
  $PY "${CARRY:-.gpu}"/pack.py pack "$W/save/checkpoint_last.pt" "$OUT/last"
else  # room for both within 64 MiB: the last without Adam's first moment
  $PY "${CARRY:-.gpu}"/pack.py pack "$W/save/checkpoint_last.pt" "$OUT/last" --no-exp-avg
  $PY "${CARRY:-.gpu}"/pack.py model "$W/save/checkpoint_best.pt" "$OUT/best"
fi 2>&1 | tee -a "$OUT/train-gpu.log"
ls -la "$OUT"
