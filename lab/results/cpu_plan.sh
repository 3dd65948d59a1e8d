# The CPU plan of run.sh (SMALL=1): functions only; run.sh sources this file after its settings
# and step functions and calls cpu_plan_main.
#
# Two lanes, one CPU thread each (two trainings at a time on a 2-core machine; at 256 wide
# one thread per training uses the cores as well as one training on both):
#   lane 1: teacher (pre-LN) -> SVD transfer -> lightformer_svd -> KD data (the teacher's
#           greedy translation of the training set) -> hypoformer_kd -> subformer
#   lane 2: dawid_teacher (post-LN) -> dawid (masks and compactors, fused) ->
#           lightformer_random -> hypoformer (no KD) -> smartformer_search -> smartformer
#           (fixed rank, matched to the searched model's size)
# Each model is evaluated as soon as it is trained (fairseq-generate of the test split, beam 5)
# and its row (params, BLEU, chrF, signatures, updates, wall-clock, training tokens/s) is
# written to ROWS_DIR/NAME.json; then the speed of every model (fairseq and ONNX Runtime, one
# thread, beam 5, batch 1 and batch 32, size of the ONNX export) to ROWS_DIR/speed.json, and
# the table (ROWS_DIR/results.md, results.json) and the plots (curves.png, frontier.png),
# which collect.py builds from the JSON files alone.
#
# (run.sh holds SAVE_ROOT's lock and ends its trainings when it is stopped.)

# cpu_evaluate NAME: the test translation of NAME's evaluated checkpoint (skipped when done;
# written atomically; a failure is returned, not hidden)
cpu_evaluate() {
  local name="$1" dir="$SAVE_ROOT/$1" out="$SAVE_ROOT/$1/generate-test.txt" rc=0
  local cmd=(fairseq-generate "$DATA_BIN" --user-dir "$USER_DIR" "${DEVICE[@]}"
    --path "$(res_checkpoint "$name")" --task translation --source-lang "$SRC" --target-lang "$TGT"
    --gen-subset test --beam "$BEAM" --lenpen "$LENPEN" --batch-size 64
    --required-batch-size-multiple 1 --post-process sentencepiece)
  if [[ "$DRY_RUN" == 1 ]]; then
    run "${cmd[@]}"
    echo "  (stdout written to $out)"
    return 0
  fi
  [[ -s "$out" ]] && return 0
  log "$name: translating the test split"
  "${cmd[@]}" >"$out.tmp" 2>"$dir/generate.log" || rc=$?
  if ((rc != 0)); then
    log "$name: fairseq-generate failed (exit $rc); the end of $dir/generate.log:"
    tail -n 5 "$dir/generate.log" >&2
    return 1
  fi
  mv "$out.tmp" "$out"
}

# cpu_row NAME: NAME's figures into ROWS_DIR/NAME.json (only once its translation exists)
cpu_row() {
  local name="$1" rc=0
  if [[ "$DRY_RUN" == 1 ]]; then
    run "${COLLECT[@]}" row "$name" --save-root "$SAVE_ROOT" --ref "$DATA_DIR/raw/test.$TGT" \
      --rows-dir "$ROWS_DIR" --commit "$CODE_COMMIT" --plan cpu
    return 0
  fi
  [[ -s "$ROWS_DIR/$name.json" ]] && return 0
  "${COLLECT[@]}" row "$name" --save-root "$SAVE_ROOT" --ref "$DATA_DIR/raw/test.$TGT" \
    --rows-dir "$ROWS_DIR" --commit "$CODE_COMMIT" --plan cpu || rc=$?
  if ((rc != 0)); then
    log "$name: collect.py row failed (exit $rc)"
    return 1
  fi
  log "$name: row written to $ROWS_DIR/$name.json"
}

# cpu_model NAME UPDATES [fairseq-train flags...]: train (fixed updates), translate, row
cpu_model() {
  local name="$1" updates="$2"
  shift 2
  res_train "$name" "$updates" 0 "$@" || return $?
  cpu_evaluate "$name" || return 1
  cpu_row "$name" || return 1
}

# the Smartformer rank matched to the searched model's size: every Q/K/V map costs
# R (d + h + d_k) parameters, an encoder layer has one attention, a decoder layer two
# (--sm-attn all), so the fixed rank is the mean of the searched ranks weighted by that
cpu_matched_rank() {
  local log="$SAVE_ROOT/smartformer_search/rank_search.jsonl"
  "$PYTHON" - "$log" "$((SM_RANK * 2))" <<'EOF'
import json, sys
path, start = sys.argv[1], int(sys.argv[2])
try:
    with open(path, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
except FileNotFoundError:
    recs = []
if not recs:
    print(start)
    sys.exit(0)
ranks = recs[-1]["ranks"]
weight = {"encoder": 1, "decoder": 2}
num = sum(weight[k.split(".")[0]] * r for k, r in ranks.items())
den = sum(weight[k.split(".")[0]] for k in ranks)
print(max(1, round(num / den)))
EOF
}

cpu_lane_teacher() {
  cpu_model teacher "$TEACHER_UPDATES" "${TEACHER[@]}" || return $?
  local init="$SAVE_ROOT/lightformer_init.pt"
  if [[ "$DRY_RUN" == 1 || (! -f "$init" && ! -f "$SAVE_ROOT/lightformer_svd/train.done") ]]; then
    log "SVD transfer: teacher -> LightFormer ($init)"
    run "${CONVERT[@]}" -i "$SAVE_ROOT/teacher/checkpoint_best.pt" -o "$init" --force \
      "${LIGHTFORMER[@]}" || {
      log "SVD transfer failed"
      return 1
    }
  fi
  cpu_model lightformer_svd "$STUDENT_UPDATES" "${LIGHTFORMER[@]}" --finetune-from-model "$init" ||
    return $?
  local kd="$SAVE_ROOT/kd-bin"
  if [[ "$DRY_RUN" == 1 || (! -f "$kd/.done" && ! -f "$SAVE_ROOT/hypoformer_kd/train.done") ]]; then
    log "KD data: the teacher translates the training set (beam $KD_BEAM) -> $kd"
    run "$REPO_ROOT/scripts/distill_data.sh" "$DATA_BIN" --path "$SAVE_ROOT/teacher/checkpoint_best.pt" \
      --out-dir "$kd" --user-dir "$USER_DIR" --beam "$KD_BEAM" --lenpen "$LENPEN" \
      --max-tokens $((MAX_TOKENS * 2)) --num-shards 0 --progress-interval 120 \
      --generate-args "--max-len-a 1.2 --max-len-b 10" "${DEVICE[@]}" || {
      log "KD data: scripts/distill_data.sh failed"
      return 1
    }
    [[ "$DRY_RUN" == 1 ]] || touch "$kd/.done"
  fi
  cpu_model hypoformer_kd "$MAX_UPDATE" "${HYPO[@]}" --task translation_seqkd \
    --kd-data-mode both --kd-distilled-data "$kd" || return $?
  cpu_model subformer "$MAX_UPDATE" "${SUB[@]}" --share-all-embeddings || return $?
}

cpu_lane_free() {
  # DA-WID's chain: its post-LN teacher, the masked student, the fused model
  res_dawid || return $?
  cpu_evaluate dawid || return 1
  cpu_row dawid || return 1
  cpu_model lightformer_random "$STUDENT_UPDATES" "${LIGHTFORMER[@]}" || return $?
  cpu_model hypoformer "$MAX_UPDATE" "${HYPO[@]}" || return $?
  cpu_model smartformer_search "$MAX_UPDATE" "${SMART_SEARCH[@]}" --share-all-embeddings || return $?
  local rank="$SM_RANK"
  if [[ "$DRY_RUN" != 1 ]]; then
    rank="$(cpu_matched_rank)" || return 1
    log "smartformer: fixed CP rank $rank (the searched model's size)"
  fi
  cpu_model smartformer "$MAX_UPDATE" "${SMART[@]}" --sm-rank "$rank" --share-all-embeddings ||
    return $?
}

# cpu_measure_costs N: the sizing step. Trains every kind of model of the plan for N updates
# with the plan's settings (one thread each, two at a time, as the plan runs them; no
# checkpoint, no validation) into SAVE_ROOT/costs/ and prints target tokens/s and updates/s
# per model (SAVE_ROOT/costs.json): what TEACHER_UPDATES and STUDENT_UPDATES are sized from.
cpu_measure_costs() {
  local n="$1" dir="$SAVE_ROOT/costs" name
  local -a names=(teacher lightformer hypoformer subformer smartformer smartformer_search)
  cpu_cost_one() {  # NAME FLAGS...
    local name="$1"
    shift
    res_train_flags "$n" 0
    mkdir -p "$dir/$name"
    local cmd=(fairseq-train "$DATA_BIN" --user-dir "$USER_DIR" --save-dir "$dir/$name"
      "${TRAIN_FLAGS[@]}" --no-save --disable-validation --log-interval 5 "$@")
    if [[ "$DRY_RUN" == 1 ]]; then
      run "${cmd[@]}"
    else
      "${cmd[@]}" >"$dir/$name/train.log" 2>&1 || {
        log "$name: fairseq-train failed; the end of $dir/$name/train.log:"
        tail -n 5 "$dir/$name/train.log" >&2
        return 1
      }
    fi
  }
  cpu_cost_pair() {
    res_in_parallel cpu_cost_one "$1" "${@:3:$2}"
    shift $(($2 + 2))
    res_in_parallel cpu_cost_one "$@"
    res_wait_all
  }
  if [[ "$PARALLEL" == 1 ]]; then export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1; fi
  [[ "$DRY_RUN" == 1 ]] || rm -rf "$dir"
  PIDS=()
  cpu_cost_pair teacher ${#TEACHER[@]} "${TEACHER[@]}" lightformer "${LIGHTFORMER[@]}"
  cpu_cost_pair hypoformer ${#HYPO[@]} "${HYPO[@]}" subformer "${SUB[@]}" --share-all-embeddings
  cpu_cost_pair smartformer $((${#SMART[@]} + 1)) "${SMART[@]}" --share-all-embeddings \
    smartformer_search "${SMART_SEARCH[@]}" --share-all-embeddings
  [[ "$DRY_RUN" == 1 ]] && return 0
  "$PYTHON" - "$dir" "${names[@]}" <<'EOF2'
import json, re, sys
root, names = sys.argv[1], sys.argv[2:]
out = {}
print(f"{'model':<20} {'params':>10} {'tokens/s':>9} {'updates/s':>9}")
for name in names:
    text = open(f"{root}/{name}/train.log", encoding="utf-8", errors="replace").read()
    inner = re.findall(r"\| train_inner \|.*?wps=([0-9.]+), ups=([0-9.]+)", text)[1:]  # (no warm-up)
    params = re.search(r"num\. shared model params: ([0-9,]+)", text)
    if not inner:
        sys.exit(f"{name}: no training progress in {root}/{name}/train.log")
    wps = sum(float(w) for w, _ in inner) / len(inner)
    ups = sum(float(u) for _, u in inner) / len(inner)
    out[name] = {"params": int(params.group(1).replace(",", "")) if params else None,
                 "tokens_per_s": round(wps, 1), "updates_per_s": round(ups, 3)}
    print(f"{name:<20} {out[name]['params'] or 0:>10,} {wps:>9.0f} {ups:>9.3f}")
json.dump(out, open(f"{root}.json", "w"), indent=2)
EOF2
}

cpu_plan_main() {
  COLLECT=("$PYTHON" "$HERE/collect.py")
  CODE_COMMIT="${CODE_COMMIT:-$(git -C "$REPO_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
  if [[ "$DRY_RUN" != 1 ]]; then mkdir -p "$ROWS_DIR"; fi
  if [[ "$PARALLEL" == 1 ]]; then
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
  fi

  log "CPU plan: rows in $ROWS_DIR, runs in $SAVE_ROOT, code $CODE_COMMIT"
  PIDS=()
  res_in_parallel cpu_lane_teacher
  res_in_parallel cpu_lane_free
  res_wait_all
  if ((INTERRUPTED)); then
    log "TIME_BUDGET spent after $((SECONDS - START)) s: run the same command again to go on"
    exit 3
  fi

  # the speed of every model: fairseq's generator and the ONNX Runtime export (and CTranslate2
  # for the dense models), one thread, beam 5; batch 1 and batch 32 side by side on the two cores
  SPEED1="$SAVE_ROOT/speed-b1.json" SPEED32="$SAVE_ROOT/speed-b32.json"
  paths=""
  for m in "${MODELS[@]}"; do paths+="${paths:+,}$m=$(res_checkpoint "$m")"; done
  cpu_speed() {  # OUT BATCH SENTENCES
    [[ "$DRY_RUN" != 1 && -s "$1" ]] && return 0
    run_log "${1%.json}.txt" bash scripts/measure_speed.sh --data "$DATA_BIN" --user-dir "$USER_DIR" \
      --path "$paths" --src-len 12 --num-sentences "$3" --timing-batch-size "$2" --runs "$SPEED_RUNS" \
      --threads 1 --beam "$BEAM" --lenpen "$LENPEN" --max-len-a 1.2 --max-len-b 10 --onnx --ct2 \
      --json "$1" --quiet
  }
  if [[ "$MEASURE_SPEED" == 1 ]]; then
    log "speed: fairseq, ONNX Runtime and CTranslate2, one thread, beam $BEAM, batch 1 and 32"
    res_in_parallel cpu_speed "$SPEED1" 1 "$SPEED_SENTENCES"
    res_in_parallel cpu_speed "$SPEED32" 32 $((SPEED_SENTENCES < 64 ? 64 : SPEED_SENTENCES))
    res_wait_all
    run "${COLLECT[@]}" speed --b1 "$SPEED1" --b32 "$SPEED32" --rows-dir "$ROWS_DIR" --commit "$CODE_COMMIT"
  fi

  # the table and the plots, from the rows alone
  run "${COLLECT[@]}" table --rows-dir "$ROWS_DIR" --corpus-stats "$DATA_DIR/stats.json" \
    --out "$ROWS_DIR/results.md" --json "$ROWS_DIR/results.json"
  logs=() labels=""
  for m in "${MODELS[@]}"; do
    if [[ "$m" != dawid ]] && [[ "$DRY_RUN" == 1 || -s "$SAVE_ROOT/$m/train.log" ]]; then
      logs+=("$SAVE_ROOT/$m/train.log") labels+="${labels:+,}$m"
    fi
  done
  if [[ "$DRY_RUN" == 1 ]] || "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
    run "$PYTHON" scripts/plot_curves.py "${logs[@]}" --labels "$labels" \
      --title "results corpus, CPU plan: validation loss" --out "$ROWS_DIR/curves.png"
    run "$PYTHON" scripts/plot_frontier.py "$ROWS_DIR/results.json" \
      --title "results corpus, CPU plan: BLEU vs size vs speed" --out "$ROWS_DIR/frontier.png"
  else
    log "matplotlib not installed: no plots"
  fi
  log "done in $((SECONDS - START)) s: $ROWS_DIR/results.md"
}
