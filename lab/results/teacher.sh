#!/usr/bin/env bash
# The converged results teacher: a post-LN Transformer 3-3 (d 256, FFN 1024, 4 heads, shared
# embeddings; the shape every method of the plugin starts from: LightFormer / Hypoformer SVD and
# TT transfers, Smartformer's CP, DA-WID's compactors, which need post-LN) trained on the
# permissive-only results corpus until its validation loss stops improving (fairseq's
# --patience: PATIENCE epochs without a lower validation loss), then evaluated (test split, beam
# 5, sacreBLEU and chrF with signatures against the raw references), packed for shipping
# (half_checkpoint.py: float16, no optimizer state, tied tables once) and used for
# sequence-level KD data (the teacher's beam translation of the training set).
#
#   bash lab/results/teacher.sh                 # CPU: one thread, resumable
#   WHEELS=.whl/results-cp312 DATA_DIR=DIR OUT=OUT STOP_SECONDS=360 CONFIGS="a b" \
#       bash lab/results/teacher.sh             # GPU lease
#
# Every step skips finished work: the training resumes from checkpoint_last.pt (fairseq's own
# resumption), SAVE_ROOT/NAME/train.done marks a training that stopped by itself (early stop or
# MAX_UPDATE), generate-test.txt / test.json and kd-bin/ are kept. So the same command resumes
# after any interruption. SAVE_ROOT lies outside the checkout.
#
# Configurations (CONFIGS, space-separated; side by side on a GPU, one after the other on a
# CPU; the one with the lowest best validation loss is the teacher, "chosen" in SAVE_ROOT):
#   a   16,384 tokens per batch, lr 1.5e-3, 500 warmup updates
#   b    8,192 tokens per batch, lr 1e-3, 1,000 warmup updates
# Both: Adam (0.9, 0.98), inverse-sqrt, dropout 0.3, label smoothing 0.1, weight decay 1e-4,
# validation every epoch, seed 1.
#
# Settings (environment): DATA_DIR (l10n_corpus.py --permissive-only output; default
# $XDG_CACHE_HOME/lightcompress/data/results-permissive), SAVE_ROOT (default
# .../lightcompress/teacher), OUT (what is packed: default SAVE_ROOT/out), CONFIGS ("a"),
# PATIENCE (10), MAX_UPDATE (30000), STOP_SECONDS (fairseq's --stop-time-hours in seconds: the
# cumulative training time after which a training validates, saves and stops without
# train.done; unset: none), THREADS (CPU threads per training, 1), KD (1: make the KD data),
# WHEELS (a folder of wheels to install first: fetch-wheels.sh's), DRY_RUN=1 (print the
# commands, run nothing), GEN_ARGS (extra fairseq-generate flags for the test and KD
# translations, e.g. "--max-len-a 0 --max-len-b 5" for a smoke test of an untrained model).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/lightcompress"
DATA_DIR="${DATA_DIR:-$CACHE_ROOT/data/results-permissive}"
SAVE_ROOT="${SAVE_ROOT:-$CACHE_ROOT/teacher}"
OUT="${OUT:-$SAVE_ROOT/out}"
CONFIGS="${CONFIGS:-a}"
PATIENCE="${PATIENCE:-10}"
MAX_UPDATE="${MAX_UPDATE:-30000}"
STOP_SECONDS="${STOP_SECONDS:-}"
THREADS="${THREADS:-1}"
KD="${KD:-1}"
DRY_RUN="${DRY_RUN:-0}"
t_log() { echo "[teacher $(date -u +%H:%M:%S)] $*" >&2; }
t_die() { echo "teacher.sh: $*" >&2; exit 2; }
for v in PATIENCE MAX_UPDATE THREADS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || t_die "$v must be a positive integer, not '${!v}'"
done
[[ -z "$STOP_SECONDS" || "$STOP_SECONDS" =~ ^[1-9][0-9]*$ ]] || t_die "STOP_SECONDS must be a positive integer, not '$STOP_SECONDS'"
[[ "$DRY_RUN" == 0 || "$DRY_RUN" == 1 ]] || t_die "DRY_RUN must be 0 or 1, not '$DRY_RUN'"
[[ "$KD" == 0 || "$KD" == 1 ]] || t_die "KD must be 0 or 1, not '$KD'"
read -r -a NAMES <<<"$CONFIGS"
((${#NAMES[@]} > 0)) || t_die "CONFIGS names no configuration (a, b)"
for n in "${NAMES[@]}"; do [[ "$n" == a || "$n" == b ]] || t_die "CONFIGS: '$n' is not a or b"; done
[[ "$DRY_RUN" == 1 || -f "$DATA_DIR/bin/dict.de.txt" ]] ||
  t_die "$DATA_DIR/bin has no dict.de.txt (build it: python examples/translation/l10n_corpus.py --permissive-only --out $DATA_DIR)"
[[ "$DRY_RUN" == 1 || -f "$DATA_DIR/raw/test.en" ]] || t_die "$DATA_DIR/raw/test.en is missing (the test references)"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1
if [[ -z "${PYTHON:-}" ]]; then
  if command -v python >/dev/null 2>&1; then PYTHON=python; else PYTHON=python3; fi
fi
cd "$REPO_ROOT"

if [[ -n "${WHEELS:-}" && "$DRY_RUN" != 1 ]]; then  # fairseq from carried wheels (no network)
  compgen -G "$WHEELS/*.whl" >/dev/null || t_die "WHEELS=$WHEELS holds no .whl file"
  SITE="$SAVE_ROOT/site"
  if [[ ! -f "$SITE/.installed" ]]; then
    t_log "installing $(find "$WHEELS" -maxdepth 1 -name '*.whl' | wc -l) wheels into $SITE"
    rm -rf "$SITE"
    "$PYTHON" -m pip install --no-index --no-deps --no-compile --quiet --target "$SITE" "$WHEELS"/*.whl
    touch "$SITE/.installed"
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

GPU=0
if [[ "$DRY_RUN" != 1 ]] && "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  GPU=1
fi
DEV=()
((GPU == 1)) || DEV=(--cpu)
read -r -a GEN <<<"${GEN_ARGS:-}"

# t_flags NAME: the training flags of configuration NAME (printed one per line)
t_flags() {
  local tokens lr warmup
  case "$1" in
    a) tokens=16384 lr=1.5e-3 warmup=500 ;;
    b) tokens=8192 lr=1e-3 warmup=1000 ;;
  esac
  printf '%s\n' "$DATA_DIR/bin" --user-dir "$REPO_ROOT/lightcompress" --save-dir "$SAVE_ROOT/$1" \
    "${DEV[@]}" --task translation --source-lang de --target-lang en \
    --arch transformer --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 \
    --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 \
    --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings \
    --dropout 0.3 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 0.0 --lr "$lr" \
    --lr-scheduler inverse_sqrt --warmup-updates "$warmup" --warmup-init-lr 1e-7 \
    --weight-decay 0.0001 --max-tokens "$tokens" --max-update "$MAX_UPDATE" \
    --patience "$PATIENCE" --seed 1 --no-epoch-checkpoints --log-format simple \
    --log-interval 50 --no-progress-bar --num-workers 0
  if [[ -n "$STOP_SECONDS" ]]; then
    printf '%s\n' --stop-time-hours "$(awk -v s="$STOP_SECONDS" 'BEGIN { printf "%.6f", s / 3600 }')"
  fi
}

# t_train NAME: train configuration NAME into SAVE_ROOT/NAME (resumes; train.done when it
# stopped by itself)
t_train() {
  local name="$1" dir="$SAVE_ROOT/$1" flags=()
  mapfile -t flags < <(t_flags "$name")
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+ fairseq-train'; printf ' %q' "${flags[@]}"; echo " >> $dir/train.log"
    return 0
  fi
  if [[ -f "$dir/train.done" ]]; then t_log "$name: trained ($(cat "$dir/train.done"))"; return 0; fi
  mkdir -p "$dir"
  local rc=0
  "$PYTHON" -m fairseq_cli.train "${flags[@]}" >>"$dir/train.log" 2>&1 || rc=$?
  # On the GPU machine fairseq-train has been seen to abort at interpreter exit ("terminate
  # called without an active exception", status 134) after its last checkpoint was written:
  # the training itself ended ("done training"), so that is not a failure.
  if ((rc == 134)) && tail -n 5 "$dir/train.log" | grep -q 'done training in'; then
    t_log "$name: fairseq-train aborted at exit after 'done training' (checkpoints written): ignored"
    rc=0
  fi
  t_log "$name: fairseq-train exit $rc; $(grep -E '\| valid \|' "$dir/train.log" | tail -n 1 | cut -c1-170)"
  ((rc == 0)) || return "$rc"
  if grep -q 'early stop since valid performance' "$dir/train.log"; then
    echo "early stop (patience $PATIENCE)" >"$dir/train.done"
  elif grep -qE "num_updates $MAX_UPDATE( |$)" "$dir/train.log"; then
    echo "max-update $MAX_UPDATE" >"$dir/train.done"
  else
    t_log "$name: stopped before converging (STOP_SECONDS); run the same command again to go on"
  fi
}

t_log "configurations ${NAMES[*]} on $( ((GPU == 1)) && echo GPU || echo "CPU ($THREADS thread(s))"), patience $PATIENCE, cap $MAX_UPDATE updates"
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$SAVE_ROOT" "$OUT"
  { date -u; git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || true; nvidia-smi -L 2>/dev/null || lscpu | grep 'Model name' || true; } >"$SAVE_ROOT/machine.txt"
fi
rc=0
if ((GPU == 1)) && ((${#NAMES[@]} > 1)); then  # side by side: fairseq is Python-bound here
  pids=()
  for n in "${NAMES[@]}"; do t_train "$n" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
else
  for n in "${NAMES[@]}"; do t_train "$n" || rc=1; done
fi
[[ "$DRY_RUN" == 1 ]] || ((rc == 0)) || t_die "a training failed (see $SAVE_ROOT/*/train.log)"

# the teacher: the configuration with the lowest best validation loss
if [[ "$DRY_RUN" == 1 ]]; then
  chosen="${NAMES[0]}"
  echo "+ (teacher: the configuration of ${NAMES[*]} with the lowest best validation loss)"
else
  chosen="$("$PYTHON" "$HERE/teacher_eval.py" choose "$SAVE_ROOT" "${NAMES[@]}")"
  echo "$chosen" >"$SAVE_ROOT/chosen"
  t_log "teacher: configuration $chosen"
fi
BEST="$SAVE_ROOT/$chosen/checkpoint_best.pt"

t_pack() {  # the chosen teacher (float16) and every log, into OUT
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "+ $PYTHON $HERE/half_checkpoint.py pack $SAVE_ROOT $OUT $chosen"
    return 0
  fi
  [[ -f "$OUT/$chosen.pt" ]] || "$PYTHON" "$HERE/half_checkpoint.py" pack "$SAVE_ROOT" "$OUT" "$chosen"
  local files=(machine.txt chosen)
  for n in "${NAMES[@]}"; do
    for f in train.log train.done generate-test.txt test.json; do
      [[ -f "$SAVE_ROOT/$n/$f" ]] && files+=("$n/$f")
    done
  done
  tar czf "$OUT/logs.tgz.tmp" -C "$SAVE_ROOT" "${files[@]}" && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"
}
t_pack

# the test split: beam 5, sacreBLEU and chrF against the raw references
for n in "${NAMES[@]}"; do
  gen=(fairseq-generate "$DATA_DIR/bin" --user-dir "$REPO_ROOT/lightcompress" "${DEV[@]}"
    --path "$SAVE_ROOT/$n/checkpoint_best.pt" --task translation --source-lang de --target-lang en
    --gen-subset test --beam 5 --lenpen 1.0 --batch-size 128 --required-batch-size-multiple 1
    --post-process sentencepiece "${GEN[@]}")
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'; printf ' %q' "${gen[@]}"; echo " > $SAVE_ROOT/$n/generate-test.txt"
    echo "+ $PYTHON $HERE/teacher_eval.py score $SAVE_ROOT/$n $DATA_DIR/raw/test.en"
    continue
  fi
  if [[ ! -f "$SAVE_ROOT/$n/test.json" ]]; then
    "$PYTHON" -m fairseq_cli.generate "${gen[@]:1}" >"$SAVE_ROOT/$n/generate-test.txt.tmp" 2>"$SAVE_ROOT/$n/generate-test.err"
    mv "$SAVE_ROOT/$n/generate-test.txt.tmp" "$SAVE_ROOT/$n/generate-test.txt"
    "$PYTHON" "$HERE/teacher_eval.py" score "$SAVE_ROOT/$n" "$DATA_DIR/raw/test.en"
  fi
  t_log "$n: $(grep -oE '"(bleu|chrf|best_valid_loss|stopped)": [^,]*' "$SAVE_ROOT/$n/test.json" | tr '\n' ' ')"
done
t_pack

# sequence-level KD data from the chosen teacher (beam 5), packed as its text (source, hypothesis)
if [[ "$KD" == 1 ]]; then
  kd=("$REPO_ROOT/scripts/distill_data.sh" "$DATA_DIR/bin" --path "$BEST" --out-dir "$SAVE_ROOT/kd-bin"
    --user-dir "$REPO_ROOT/lightcompress" --beam 5 --lenpen 1.0 --max-tokens 16384 --progress-interval 30
    --generate-args "--max-len-a 1.2 --max-len-b 10${GEN_ARGS:+ $GEN_ARGS}" "${DEV[@]}")
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'; printf ' %q' "${kd[@]}"; echo
  else
    PYTHON="$PYTHON" bash "${kd[@]}" >"$SAVE_ROOT/kd.log" 2>&1 || { tail -n 5 "$SAVE_ROOT/kd.log" >&2; t_die "KD data failed"; }
    tar czf "$OUT/kd-bin.tgz.tmp" --exclude kd-bin/distill-work -C "$SAVE_ROOT" kd-bin kd.log && mv "$OUT/kd-bin.tgz.tmp" "$OUT/kd-bin.tgz"
  fi
fi
[[ "$DRY_RUN" == 1 ]] || ls -la "$OUT" >&2
