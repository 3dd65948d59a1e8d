#!/usr/bin/env bash
# Smartformer's rank search vs. the same model at one fixed rank of the same size, on any
# sentencepiece-encoded fairseq corpus (e.g. the project's results corpus, data/results: bin/
# and raw/test.en, examples/translation/l10n_corpus.py), in one short run:
#
#   1. a dense Transformer teacher (ARCH_FLAGS, TEACHER_UPDATES updates)
#   2. lightcompress-convert: CP transfer at START_RANK -> trained with the rank search
#      (--sm-search, RANKS, INTERVAL) for STUDENT_UPDATES updates
#   3. match_rank.py: the fixed rank with the searched model's parameter count; CP transfer from
#      the same teacher at that rank -> trained STUDENT_UPDATES updates without the search
#   4. fairseq-generate (beam 5) + sacreBLEU on the test split for all three; a table in
#      OUT/compare.md with parameters, BLEU (signature), and the searched ranks
#
# Each step skips what exists. Environment: DATA (default data/results), OUT (default
# checkpoints/smartformer-compare), TEACHER_UPDATES (2000), STUDENT_UPDATES (1500),
# START_RANK (64), RANKS (16,32,48,64), INTERVAL (100), MAX_TOKENS (8192), FP16 (1 on a GPU),
# PYTHON (python3). DRY_RUN=1 prints the commands.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
DATA="${DATA:-data/results}"
OUT="${OUT:-checkpoints/smartformer-compare}"
TEACHER_UPDATES="${TEACHER_UPDATES:-2000}"
STUDENT_UPDATES="${STUDENT_UPDATES:-1500}"
START_RANK="${START_RANK:-64}"
RANKS="${RANKS:-16,32,48,64}"
INTERVAL="${INTERVAL:-100}"
MAX_TOKENS="${MAX_TOKENS:-8192}"
PYTHON="${PYTHON:-python3}"
DRY_RUN="${DRY_RUN:-0}"
ARCH_FLAGS=(--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
  --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
  --decoder-attention-heads 4 --share-all-embeddings)
DEVICE=(--cpu) GEN_DEVICE=(--cpu)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  DEVICE=() GEN_DEVICE=()
  if [[ "${FP16:-1}" == 1 ]]; then DEVICE=(--fp16); fi
fi

smc_run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    echo
  else
    "$@"
  fi
}
smc_die() {
  echo "compare-on-corpus: $*" >&2
  exit 2
}
[[ "$DRY_RUN" == 1 || -f "$DATA/bin/dict.de.txt" ]] || smc_die "no corpus in $DATA (bin/dict.de.txt)"
[[ "$DRY_RUN" == 1 ]] || mkdir -p "$OUT"

# smc_train NAME UPDATES [flags...]: fairseq-train into OUT/NAME unless OUT/NAME/train.done exists
# (its log in OUT/NAME.log; the decision and validation lines are echoed)
smc_train() {
  local name="$1" updates="$2"
  shift 2
  if [[ "$DRY_RUN" != 1 && -f "$OUT/$name/train.done" ]]; then return 0; fi
  local cmd=("$PYTHON" -m fairseq_cli.train "$DATA/bin" --user-dir "$ROOT/lightcompress"
    --save-dir "$OUT/$name" --optimizer adam --adam-betas '(0.9, 0.98)' --lr 7e-4
    --lr-scheduler inverse_sqrt --warmup-updates 500 --dropout 0.1
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens "$MAX_TOKENS"
    --max-update "$updates" --seed 1 --log-format simple --log-interval 100
    --no-epoch-checkpoints --validate-interval-updates 500 --save-interval-updates 500
    --keep-interval-updates 1 "${DEVICE[@]}" "${ARCH_FLAGS[@]}" "$@")
  if [[ "$DRY_RUN" == 1 ]]; then
    smc_run "${cmd[@]}"
    return 0
  fi
  "${cmd[@]}" >"$OUT/$name.log" 2>&1 || smc_die "$name: training failed (see $OUT/$name.log)"
  grep -E "rank search|\| valid \|" "$OUT/$name.log" || true
  touch "$OUT/$name/train.done"
}

# smc_convert RANK OUTPUT: CP transfer of the teacher at RANK
smc_convert() {
  if [[ "$DRY_RUN" != 1 && -f "$2" ]]; then return 0; fi
  smc_run "$PYTHON" -m lightcompress.convert.cli --input "$OUT/teacher/checkpoint_last.pt" \
    --output "$2" --arch smartformer_iwslt_de_en --sm-rank "$1" "${ARCH_FLAGS[@]}" --quiet
}

# smc_score NAME: test BLEU and chrF of OUT/NAME/checkpoint_last.pt (sacreBLEU, detokenized text)
smc_score() {
  local name="$1" gen="$OUT/$1/generate-test.txt"
  local cmd=("$PYTHON" -m fairseq_cli.generate "$DATA/bin" --user-dir "$ROOT/lightcompress"
    --path "$OUT/$name/checkpoint_last.pt" --task translation --gen-subset test --beam 5
    --batch-size 128 --required-batch-size-multiple 1 --remove-bpe sentencepiece
    "${GEN_DEVICE[@]}")
  if [[ "$DRY_RUN" == 1 ]]; then
    smc_run "${cmd[@]}"
    return 0
  fi
  if [[ ! -f "$gen.score" ]]; then
    "${cmd[@]}" >"$gen" 2>"$gen.log" || smc_die "$name: fairseq-generate failed (see $gen.log)"
    grep "^H-" "$gen" | sed 's/^H-//' | sort -k1,1n | cut -f3- >"$gen.hyp"
    "$PYTHON" -m sacrebleu "$DATA/raw/test.en" -i "$gen.hyp" -m bleu chrf -w 2 --format text \
      >"$gen.score"
  fi
}

smc_train teacher "$TEACHER_UPDATES" --arch transformer_iwslt_de_en
smc_convert "$START_RANK" "$OUT/search_init.pt"
smc_train search "$STUDENT_UPDATES" --arch smartformer_iwslt_de_en --sm-rank "$START_RANK" \
  --finetune-from-model "$OUT/search_init.pt" --task translation_smartformer --sm-search \
  --sm-search-ranks "$RANKS" --sm-search-interval "$INTERVAL" --sm-search-valid-batches 20
if [[ "$DRY_RUN" == 1 ]]; then
  RANK=RANK
else
  RANK="$("$PYTHON" "$ROOT/examples/translation/smartformer/match_rank.py" --path "$OUT/search/checkpoint_last.pt")"
fi
smc_convert "$RANK" "$OUT/fixed_init.pt"
smc_train fixed "$STUDENT_UPDATES" --arch smartformer_iwslt_de_en --sm-rank "$RANK" \
  --finetune-from-model "$OUT/fixed_init.pt" --task translation_smartformer
for name in teacher search fixed; do smc_score "$name"; done
[[ "$DRY_RUN" == 1 ]] && exit 0
{
  echo "| model | params | test BLEU / chrF (sacreBLEU) |"
  echo "|---|---|---|"
  for name in teacher search fixed; do
    params="$("$PYTHON" -m lightcompress.measure.params --path "$OUT/$name/checkpoint_last.pt" |
      "$PYTHON" -c 'import json, sys; print("{:,}".format(json.load(sys.stdin)["total"]))')"
    echo "| $name | $params | $(tr '\n' ' ' <"$OUT/$name/generate-test.txt.score") |"
  done
  echo
  echo "fixed rank: $RANK; searched ranks (last decision):"
  tail -n 1 "$OUT/search/rank_search.jsonl"
} | tee "$OUT/compare.md"
