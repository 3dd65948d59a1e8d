# shellcheck shell=bash
# The shared recipe library of examples/. Every recipe script sources its family's common.sh,
# which sources this file and then only adds functions named with the family's prefix:
#
#   examples/translation/lightformer/common.sh  lf_*    (and examples/summarization/lightformer/)
#   examples/translation/hypoformer/common.sh   hypo_*
#   examples/translation/subformer/common.sh    sf_*    (and summarization/, language_model/)
#   examples/translation/kd/common.sh           kd_*
#   examples/translation/smartformer/common.sh  sm_*    (on top of lightformer/common.sh)
#
# No family redefines a function of this file or of another family (tests/test_recipes.py
# checks it). A family sets LOG_TAG (the tag of its log lines) and SAVE_ROOT's default.
# Defines functions and defaults only; sourcing it runs nothing but `nvidia-smi -L` (when
# NUM_GPUS is unset).
#
# Environment (all optional; every default can be overridden):
#   DRY_RUN=1       print the commands (one per line, "+ " and the command shell-quoted) instead of
#                   running them: nothing is downloaded, trained or written
#   PYTHON          python with fairseq and lightcompress (default: python, else python3; a real
#                   run stops with a message when neither is found)
#   USER_DIR        fairseq --user-dir (default: the folder `python -m lightcompress --user-dir`
#                   prints, found without importing fairseq; without python, this checkout's
#                   lightcompress/, which is what that command prints here)
#   DATA_ROOT       where the data-bin folders live                           (default: data-bin)
#   DATA_BIN        the binarized data of the recipe     (default: $DATA_ROOT/<dataset folder>)
#   NUM_GPUS        GPUs to train on (default: the number `nvidia-smi -L` lists, limited to the
#                   devices CUDA_VISIBLE_DEVICES shows (set and empty: none), else 0, which trains
#                   on the CPU: every training step then first warns with its planned number of
#                   updates and a rough wall-clock estimate, see cpu_warning)
#   SMALL=1         a plan a CPU finishes: at most SMALL_MAX_UPDATE (2000) updates of at most
#                   SMALL_MAX_TOKENS (2048) tokens, update-freq 1, warmup / save / lr-period
#                   intervals scaled by the same factor, under SAVE_ROOT-small (see small_flags
#                   and examples/common/README.md)
#   CPU_WPS         the CPU training throughput the estimate assumes (default 1300-1900 target
#                   tokens/s: a 3-3 256-wide Transformer on 2 CPU cores)
#   MAX_TOKENS      tokens per GPU per batch                  (default: the paper's, see below)
#   UPDATE_FREQ     gradient accumulation (default: computed so that NUM_GPUS x MAX_TOKENS x
#                   UPDATE_FREQ equals the paper's effective batch)
#   MAX_UPDATE, LR, WARMUP, DROPOUT, WEIGHT_DECAY, SEED, AVG_N: training schedule overrides
#   FP16=0          train in fp32 on GPUs (default: --fp16; with NUM_GPUS=0 fairseq runs --cpu)
#   EXTRA_TRAIN_ARGS  extra fairseq-train flags (word-split), e.g. "--num-workers 4"
#   MOSES_DIR       optional mosesdecoder checkout: its perl scripts detokenize for sacreBLEU (and
#                   tokenize in prepare-iwslt14.sh) instead of the `sacremoses` command
#   MEASURE_SPEED=0 skip scripts/measure_speed.sh (result.json then has tokens_per_s null)
#   MIN_FREE_GB     free disk space the checkpoints need where SAVE_ROOT lies; check_tools stops
#                   before training with less                                     (default: 5)
#
# Results: evaluate writes SAVE_DIR/results.txt (sacreBLEU with its signature) and, for BLEU,
# SAVE_DIR/result.json (params, BLEU, signature, tokens/s once speed_column has measured it),
# the format scripts/plot_frontier.py reads.
#
# Tools, all from pip (check_tools names what is missing, with how to get it, before anything
# trains): fairseq and lightcompress (make install), sacrebleu, sacremoses (detokenizing for
# sacreBLEU, tokenizing IWSLT'14), subword-nmt (IWSLT'14 BPE), sentencepiece (GigaWord, CNN-DM),
# rouge-score (ROUGE), gdown (only to download from Google Drive). Nothing is cloned.

COMMON_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$COMMON_DIR/../.." && pwd)"
LOG_TAG=recipes
DRY_RUN="${DRY_RUN:-0}"
SMALL="${SMALL:-0}"
SMALL_MAX_UPDATE="${SMALL_MAX_UPDATE:-2000}"
SMALL_MAX_TOKENS="${SMALL_MAX_TOKENS:-2048}"
CPU_WPS="${CPU_WPS:-1300-1900}"
# what the user set (before a family's common.sh gives SAVE_ROOT / KD_BIN its default): SMALL=1
# moves only the defaults (small_paths)
USER_SAVE_ROOT="${SAVE_ROOT:-}"
USER_KD_BIN="${KD_BIN:-}"
DATA_ROOT="${DATA_ROOT:-data-bin}"
SEED="${SEED:-1}"
MEASURE_SPEED="${MEASURE_SPEED:-1}"
MOSES_DIR="${MOSES_DIR:-}"
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python
  if ! command -v python >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
    PYTHON=python3
  fi
fi
export PYTHON # scripts/distill_data.sh and scripts/measure_speed.sh read it
# visible_gpus: the GPUs fairseq would see: those `nvidia-smi -L` lists (0 without nvidia-smi),
# limited by CUDA_VISIBLE_DEVICES when it is set (CUDA reads it up to the first invalid entry:
# "" and "-1" hide every GPU).
visible_gpus() {
  local n=0 visible=0 dev
  if command -v nvidia-smi >/dev/null 2>&1; then
    n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  fi
  if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
    local devs=()
    IFS=, read -r -a devs <<<"$CUDA_VISIBLE_DEVICES"
    for dev in "${devs[@]}"; do
      dev="${dev// /}"
      [[ "$dev" =~ ^([0-9]+|GPU-.+|MIG-.+)$ ]] || break
      visible=$((visible + 1))
    done
    if ((visible < n)); then n="$visible"; fi
  fi
  echo "${n:-0}"
}
if [[ -z "${NUM_GPUS:-}" ]]; then
  NUM_GPUS="$(visible_gpus)"
fi

log() { echo "[$LOG_TAG] $*" >&2; }
die() {
  echo "[$LOG_TAG] error: $*" >&2
  exit 1
}

# the settings every recipe shares, checked before anything runs
for _v in DRY_RUN SMALL MEASURE_SPEED; do
  [[ "${!_v}" == 0 || "${!_v}" == 1 ]] || die "$_v must be 0 or 1, not '${!_v}'"
done
for _v in SMALL_MAX_UPDATE SMALL_MAX_TOKENS; do
  [[ "${!_v}" =~ ^[1-9][0-9]*$ ]] || die "$_v must be a positive integer, not '${!_v}'"
done
[[ "$SEED" =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, not '$SEED'"
[[ "$NUM_GPUS" =~ ^[0-9]+$ ]] || die "NUM_GPUS must be a non-negative integer, not '$NUM_GPUS'"
unset _v

# ---------------------------------------------------------------------------------------------
# Running commands (or printing them: DRY_RUN=1)
# ---------------------------------------------------------------------------------------------

# run CMD...: run a command, or print it (shell-quoted, after "+ ") when DRY_RUN=1.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# run_log LOG CMD...: run a command with its output appended to LOG (and shown).
run_log() {
  local logfile="$1"
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    run "$@"
    echo "  (output appended to $logfile)"
  else
    mkdir -p "$(dirname "$logfile")"
    "$@" 2>&1 | tee -a "$logfile"
  fi
}

# run_to OUT CMD...: run a command with its stdout written to OUT (atomically).
run_to() {
  local out="$1"
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    run "$@"
    echo "  (stdout written to $out)"
  else
    mkdir -p "$(dirname "$out")"
    # (explicit: set -e does not act inside a function called with || or in an if)
    local rc=0
    "$@" >"$out.tmp" || rc=$?
    if ((rc != 0)); then
      rm -f "$out.tmp"
      return "$rc"
    fi
    mv "$out.tmp" "$out"
  fi
}

# run_pipe OUT CMD... ['|' CMD...]: run_to for a pipeline, its commands separated by a '|'
# argument: run_pipe out.txt grep x in.txt '|' sort.
run_pipe() {
  local out="$1" arg
  shift
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '+'
    for arg in "$@"; do
      if [[ "$arg" == '|' ]]; then printf ' |'; else printf ' %q' "$arg"; fi
    done
    printf '\n'
    echo "  (stdout written to $out)"
  else
    mkdir -p "$(dirname "$out")"
    pipeline "$@" >"$out.tmp"
    mv "$out.tmp" "$out"
  fi
}

# pipeline CMD... ['|' CMD...]: run the commands connected by pipes (run_pipe's worker).
pipeline() {
  local cmd=()
  while (($# > 0)) && [[ "$1" != '|' ]]; do
    cmd+=("$1")
    shift
  done
  if (($# > 0)); then
    shift
    "${cmd[@]}" | pipeline "$@"
  else
    "${cmd[@]}"
  fi
}

# fetch URL OUT: download URL to OUT unless OUT exists (a .part file is renamed when complete).
# Google Drive links need gdown (pip install gdown); otherwise download by hand into OUT's folder.
fetch() {
  local url="$1" out="$2"
  if [[ -s "$out" ]]; then
    log "using $out"
    return 0
  fi
  log "downloading $url -> $out"
  [[ "$DRY_RUN" == 1 ]] || mkdir -p "$(dirname "$out")"
  local rc=0
  if [[ "$url" == *drive.google.com* ]]; then
    [[ "$DRY_RUN" == 1 ]] || command -v gdown >/dev/null 2>&1 ||
      die "$url is on Google Drive: install gdown (pip install gdown), or download it by hand to $out"
    run gdown "$url" -O "$out.part" || rc=$?
  elif command -v curl >/dev/null 2>&1; then
    run curl -fL --retry 3 -o "$out.part" "$url" || rc=$?
  else
    run wget -O "$out.part" "$url" || rc=$?
  fi
  if ((rc != 0)); then
    rm -f "$out.part"
    die "cannot download $url (exit $rc: offline, or the address moved?): fetch it by hand to $out and run this script again (a file there is used as it is)"
  fi
  run mv "$out.part" "$out"
}

# ---------------------------------------------------------------------------------------------
# Python, the plugin and the tools: checked before anything runs
# ---------------------------------------------------------------------------------------------

have_python() { command -v "$PYTHON" >/dev/null 2>&1; }

# resolve_user_dir: set USER_DIR (unless given) to the folder `python -m lightcompress
# --user-dir` prints, i.e. the lightcompress package that PYTHON imports, found without importing
# it (and fairseq); else this checkout's lightcompress/. Returns 1 when there is neither.
resolve_user_dir() {
  [[ -z "${USER_DIR:-}" ]] || return 0
  if have_python; then
    USER_DIR="$("$PYTHON" -c 'import importlib.util, os
spec = importlib.util.find_spec("lightcompress")
if spec and spec.origin:
    print(os.path.dirname(os.path.abspath(spec.origin)))' 2>/dev/null || true)"
  fi
  if [[ -z "${USER_DIR:-}" && -f "$REPO_ROOT/lightcompress/__main__.py" ]]; then
    USER_DIR="$REPO_ROOT/lightcompress"
  fi
  [[ -n "${USER_DIR:-}" ]]
}

# user_dir: print the fairseq --user-dir (see resolve_user_dir; check_tools resolves it once).
user_dir() {
  resolve_user_dir || die "cannot find lightcompress: install it (make install) or set USER_DIR"
  echo "$USER_DIR"
}

# tool_hint CMD: how to get CMD.
tool_hint() {
  case "$1" in
    fairseq-*) echo "fairseq: make install" ;;
    lightcompress-*) echo "lightcompress: make install" ;;
    sacrebleu | sacremoses | subword-nmt | gdown) echo "pip install $1" ;;
    perl | curl | wget | tar | gzip) echo "the $1 package of your system" ;;
    *) echo "not on PATH" ;;
  esac
}

MISSING=()

# need_cmd CMD...: note each CMD that is not on PATH (see report_missing).
need_cmd() {
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 || MISSING+=("$cmd ($(tool_hint "$cmd"))")
  done
}

# need_python: note a missing PYTHON.
need_python() {
  have_python ||
    MISSING+=("python ('$PYTHON' not found: activate the environment with fairseq and lightcompress, or set PYTHON)")
}

# need_module MODULE PACKAGE: note MODULE when PYTHON cannot import it (looked up, not imported).
need_module() {
  have_python || return 0 # need_python notes that
  "$PYTHON" -c 'import importlib.util, sys
sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$1" 2>/dev/null ||
    MISSING+=("the python module $1 (pip install $2)")
}

# need_file PATH WHAT: note PATH (described as WHAT) when it does not exist.
need_file() { [[ -e "$1" ]] || MISSING+=("$1 ($2)"); }

# need_disk: MIN_FREE_GB (default 5) GB free on the file system of SAVE_ROOT (or of its nearest
# existing parent): checkpoints of days of training must not fail on a full disk.
need_disk() {
  local dir="${SAVE_ROOT:-.}" free_kb want=${MIN_FREE_GB:-5}
  while [[ ! -d "$dir" && "$dir" != / && "$dir" != . ]]; do dir="$(dirname "$dir")"; done
  [[ -d "$dir" ]] || dir=.
  command -v df >/dev/null 2>&1 || return 0  # no df (a minimal PATH): nothing to say
  free_kb="$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 { print $4 }' || true)"
  if [[ "$free_kb" =~ ^[0-9]+$ ]] && ((free_kb < want * 1024 * 1024)); then
    MISSING+=("disk space: $((free_kb / 1024)) MB free in $dir, checkpoints need ${want} GB (MIN_FREE_GB)")
  fi
}

# need_detokenizer: the Moses detokenizer (MOSES_DIR's perl script, or the sacremoses command).
need_detokenizer() {
  if [[ -n "$MOSES_DIR" ]]; then
    need_cmd perl
    need_file "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" "MOSES_DIR is not a mosesdecoder checkout"
  else
    need_cmd sacremoses
  fi
}

# report_missing: stop with one message naming everything noted as missing (a dry run only
# says what a real run would miss, and goes on).
report_missing() {
  ((${#MISSING[@]} > 0)) || return 0
  local msg item
  msg="missing before anything runs:"
  for item in "${MISSING[@]}"; do msg+=$'\n'"  - $item"; done
  MISSING=()
  if [[ "$DRY_RUN" == 1 ]]; then
    log "dry run: a real run would stop here, $msg"
  else
    die "$msg"
  fi
}

# require CMD...: stop unless every CMD is on PATH (one message for all; a dry run goes on).
require() {
  need_cmd "$@"
  report_missing
}

# check_tools [CMD...]: run by every row before its first training step. Checks python, the
# plugin (and resolves USER_DIR once), fairseq-train, the given CMDs, the scorer of METRIC (bleu:
# fairseq-generate, sacrebleu, the detokenizer, and fairseq-score with compound splitting; rouge:
# fairseq-generate, rouge-score; ppl: fairseq-eval-lm) and the binarized data
# (DATA_BIN/DATA_CHECK, default dict.$SRC.txt), then stops with one message naming everything
# missing. A dry run only reports. Runs once per script.
check_tools() {
  small_paths
  [[ "${TOOLS_CHECKED:-0}" != 1 ]] || return 0
  TOOLS_CHECKED=1
  need_python
  resolve_user_dir || MISSING+=("lightcompress (make install, or set USER_DIR)")
  need_cmd fairseq-train "$@"
  case "${METRIC:-}" in
    bleu)
      need_cmd fairseq-generate sacrebleu
      need_detokenizer
      if [[ "${COMPOUND_SPLIT:-0}" == 1 ]]; then need_cmd fairseq-score perl; fi
      ;;
    rouge)
      need_cmd fairseq-generate
      need_module rouge_score rouge-score
      need_file "$REPO_ROOT/examples/summarization/lightformer/score_rouge.py" "the ROUGE scorer"
      ;;
    ppl) need_cmd fairseq-eval-lm ;;
  esac
  need_file "$DATA_BIN/${DATA_CHECK:-dict.$SRC.txt}" \
    "no binarized data: run the dataset's prepare-*.sh first, or set DATA_BIN"
  need_disk
  report_missing
}

# ---------------------------------------------------------------------------------------------
# Datasets: the paper's batch and schedule, and how to decode and score (LightFormer and
# Hypoformer; Subformer has its own schedules).
#
# The effective batch is PAPER_GPUS x PAPER_MAX_TOKENS (x PAPER_UPDATE_FREQ) tokens per update;
# UPDATE_FREQ is derived from it for the GPUs at hand (see set_update_freq).
# Sources: IWSLT'14 -- fairseq examples/translation/README.md (transformer_iwslt_de_en: adam
# (0.9, 0.98), lr 5e-4, inverse_sqrt, warmup 4000, dropout 0.3, weight decay 1e-4, label smoothing
# 0.1, max-tokens 4096 on one GPU). WMT'14 En-De -- Transformer base (Vaswani et al. 2017:
# ~25k source + 25k target tokens per step, 100k steps, dropout 0.1) in fairseq's form: 8 GPUs x
# 4096 tokens, lr 7e-4, inverse_sqrt, warmup 4000, warmup-init-lr 1e-7. WMT'16 En-Ro -- DeLighT's
# nmt_wmt16_en2ro.py batch and length (8 GPUs x 4096 tokens, 100k updates) with the base
# schedule above and dropout 0.3. GigaWord -- the WMT base recipe (our choice: the paper gives
# no schedule). MAX_UPDATE for IWSLT (50k, about 45 epochs) and the averaging windows are ours.
# ---------------------------------------------------------------------------------------------
use_dataset() {
  DATASET="$1"
  case "$DATASET" in
    iwslt14)
      : "${DATA_BIN:=$DATA_ROOT/iwslt14.tokenized.de-en}"
      SRC=de TGT=en
      DENSE_ARCH="${DENSE_ARCH:-transformer_iwslt_de_en}"
      PAPER_GPUS=1 PAPER_MAX_TOKENS=4096
      : "${LR:=5e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.3}" "${WEIGHT_DECAY:=1e-4}"
      : "${MAX_UPDATE:=50000}"
      AVG_MODE=epoch
      : "${AVG_N:=10}"
      BEAM=5 LENPEN=1.0 COMPOUND_SPLIT=0 BPE_KIND=subword_nmt METRIC=bleu
      SPEED_SRC_LEN=23
      ;;
    wmt14ende)
      : "${DATA_BIN:=$DATA_ROOT/wmt16_en_de_bpe32k}"
      SRC=en TGT=de
      DENSE_ARCH="${DENSE_ARCH:-transformer_wmt_en_de}"
      PAPER_GPUS=8 PAPER_MAX_TOKENS=4096
      : "${LR:=7e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.1}" "${WEIGHT_DECAY:=0.0}"
      : "${MAX_UPDATE:=100000}"
      AVG_MODE=update
      : "${AVG_N:=5}"
      BEAM=4 LENPEN=0.6 COMPOUND_SPLIT=1 BPE_KIND=subword_nmt METRIC=bleu
      SPEED_SRC_LEN=30
      ;;
    wmt16enro)
      : "${DATA_BIN:=$DATA_ROOT/wmt16_en_ro}"
      SRC=en TGT=ro
      DENSE_ARCH="${DENSE_ARCH:-transformer_wmt_en_de}"
      PAPER_GPUS=8 PAPER_MAX_TOKENS=4096
      : "${LR:=7e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.3}" "${WEIGHT_DECAY:=0.0}"
      : "${MAX_UPDATE:=100000}"
      AVG_MODE=update
      : "${AVG_N:=5}"
      BEAM=5 LENPEN=1.0 COMPOUND_SPLIT=0 BPE_KIND=subword_nmt METRIC=bleu
      SPEED_SRC_LEN=30
      ;;
    gigaword)
      : "${DATA_BIN:=$DATA_ROOT/gigaword}"
      SRC=article TGT=title
      DENSE_ARCH="${DENSE_ARCH:-transformer_wmt_en_de}"
      PAPER_GPUS=8 PAPER_MAX_TOKENS=4096
      : "${LR:=5e-4}" "${WARMUP:=4000}" "${DROPOUT:=0.1}" "${WEIGHT_DECAY:=0.0}"
      : "${MAX_UPDATE:=100000}"
      AVG_MODE=update
      : "${AVG_N:=5}"
      BEAM=5 LENPEN=1.0 COMPOUND_SPLIT=0 BPE_KIND=sentencepiece METRIC=rouge
      SPEED_SRC_LEN=30
      ;;
    *) die "unknown dataset '$DATASET'" ;;
  esac
  : "${MAX_TOKENS:=$PAPER_MAX_TOKENS}"
  set_update_freq
}

# UPDATE_FREQ = ceil(PAPER_GPUS x PAPER_MAX_TOKENS / (max(NUM_GPUS, 1) x MAX_TOKENS)), so that
# the effective batch stays the paper's on fewer GPUs (or with smaller MAX_TOKENS).
set_update_freq() {
  small_paths
  local gpus=$((NUM_GPUS > 0 ? NUM_GPUS : 1))
  local paper=$((PAPER_GPUS * PAPER_MAX_TOKENS))
  local per_step=$((gpus * MAX_TOKENS))
  if [[ -z "${UPDATE_FREQ:-}" ]]; then
    UPDATE_FREQ=$(((paper + per_step - 1) / per_step))
  fi
  if ((gpus * MAX_TOKENS * UPDATE_FREQ != paper)); then
    log "note: effective batch ${gpus}x${MAX_TOKENS}x${UPDATE_FREQ} tokens differs from the paper's ${paper}"
  fi
}

# device_flags: append to TRAIN_FLAGS --distributed-world-size (NUM_GPUS > 1), and --cpu
# (NUM_GPUS=0) or --fp16 followed by the array FP16_FLAGS (unless FP16=0).
FP16_FLAGS=()
device_flags() {
  if ((NUM_GPUS > 1)); then
    TRAIN_FLAGS+=(--distributed-world-size "$NUM_GPUS")
  fi
  if ((NUM_GPUS == 0)); then
    TRAIN_FLAGS+=(--cpu)
  elif [[ "${FP16:-1}" == 1 ]]; then
    TRAIN_FLAGS+=(--fp16 "${FP16_FLAGS[@]}")
  fi
}

# extra_train_flags: append EXTRA_TRAIN_ARGS (word-split) to TRAIN_FLAGS.
extra_train_flags() {
  local extra=()
  read -r -a extra <<<"${EXTRA_TRAIN_ARGS:-}"
  TRAIN_FLAGS+=("${extra[@]}")
}

# ---------------------------------------------------------------------------------------------
# Training on a CPU: the warning, and the SMALL=1 plan
# ---------------------------------------------------------------------------------------------

# small_paths: with SMALL=1, move the default SAVE_ROOT and KD_BIN (not ones the user set) to
# SAVE_ROOT-small and KD_BIN-small, so that a small run is never taken for a paper-scale one (rows
# skip what finished before) and small distilled data never replaces the teacher's. Runs from
# set_update_freq and check_tools, which every row calls before it uses either; each moves once.
SMALL_SAVE_ROOT_MOVED=0
SMALL_KD_BIN_MOVED=0
small_paths() {
  [[ "$SMALL" == 1 ]] || return 0
  if [[ "$SMALL_SAVE_ROOT_MOVED" == 0 && -z "$USER_SAVE_ROOT" && -n "${SAVE_ROOT:-}" ]]; then
    SAVE_ROOT="$SAVE_ROOT-small"
    SMALL_SAVE_ROOT_MOVED=1
  fi
  if [[ "$SMALL_KD_BIN_MOVED" == 0 && -z "$USER_KD_BIN" && -n "${KD_BIN:-}" ]]; then
    KD_BIN="$KD_BIN-small"
    SMALL_KD_BIN_MOVED=1
  fi
}

# flag_of NAME: the value after the last NAME in the array FIT_ARGS (empty when absent).
flag_of() {
  local i value=""
  for ((i = 0; i + 1 < ${#FIT_ARGS[@]}; i++)); do
    if [[ "${FIT_ARGS[i]}" == "$1" ]]; then value="${FIT_ARGS[i + 1]}"; fi
  done
  echo "$value"
}

# small_flags SAVE_DIR: with SMALL=1, rewrite the fairseq-train flags in the array FIT_ARGS to the
# small plan: --max-update N -> S = min(N, SMALL_MAX_UPDATE); --max-tokens at most
# SMALL_MAX_TOKENS; --update-freq 1; --warmup-updates, --save-interval-updates and
# --lr-period-updates times S / N (at least 1), so that the schedule keeps its shape.
small_flags() {
  [[ "$SMALL" == 1 ]] || return 0
  local n s i v
  n="$(flag_of --max-update)"
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || return 0
  s=$((n < SMALL_MAX_UPDATE ? n : SMALL_MAX_UPDATE))
  for ((i = 0; i + 1 < ${#FIT_ARGS[@]}; i++)); do
    v="${FIT_ARGS[i + 1]}"
    case "${FIT_ARGS[i]}" in
      --max-update) FIT_ARGS[i + 1]="$s" ;;
      --max-tokens)
        if [[ "$v" =~ ^[0-9]+$ ]] && ((v > SMALL_MAX_TOKENS)); then FIT_ARGS[i + 1]="$SMALL_MAX_TOKENS"; fi
        ;;
      --update-freq) FIT_ARGS[i + 1]=1 ;;
      --warmup-updates | --save-interval-updates | --lr-period-updates)
        if [[ "$v" =~ ^[0-9]+$ ]]; then
          v=$((v * s / n))
          FIT_ARGS[i + 1]=$((v > 0 ? v : 1))
        fi
        ;;
    esac
  done
  log "SMALL=1: $1: $s of the plan's $n updates, at most $SMALL_MAX_TOKENS tokens per batch, update-freq 1, warmup and save intervals x $s/$n"
}

# duration LOW HIGH: a range of seconds in one unit: "25-40 min", "7.5-11 hours", "3.2-4.6 days".
duration() {
  awk -v lo="$1" -v hi="$2" 'BEGIN {
    if (hi < 5400) { d = 60; unit = "min" }
    else if (hi < 172800) { d = 3600; unit = "hours" }
    else { d = 86400; unit = "days" }
    lo /= d; hi /= d
    printf (lo < 10 ? "%.1f" : "%.0f"), lo; printf "-"
    printf (hi < 10 ? "%.1f" : "%.0f"), hi; printf " %s", unit }'
}

# cpu_warning SAVE_DIR: when no GPU is visible (NUM_GPUS=0), warn before training SAVE_DIR with
# the flags in FIT_ARGS: its planned updates and a rough wall-clock estimate. Assumptions: a batch
# holds about 70 % of --max-tokens as target tokens (the demo's teacher: 1,250-1,600 per batch at
# --max-tokens 2048), and training runs at CPU_WPS target tokens/s, by default 1,300-1,900: what
# a 3-3 256-wide Transformer (the demo's teacher) trains at on 2 CPU cores. The papers' models
# are bigger and slower, so read it as a lower bound.
cpu_warning() {
  ((NUM_GPUS == 0)) || return 0
  local updates tokens freq lo hi total
  updates="$(flag_of --max-update)" tokens="$(flag_of --max-tokens)" freq="$(flag_of --update-freq)"
  freq="${freq:-1}" lo="${CPU_WPS%-*}" hi="${CPU_WPS#*-}"
  if ! [[ "$updates" =~ ^[0-9]+$ && "$tokens" =~ ^[0-9]+$ && "$freq" =~ ^[0-9]+$ &&
    "$lo" =~ ^[1-9][0-9]*$ && "$hi" =~ ^[1-9][0-9]*$ ]]; then
    log "warning: no GPU visible (NUM_GPUS=0): $1 trains on the CPU"
    return 0
  fi
  total=$((updates * tokens * freq * 7 / 10))
  log "warning: no GPU visible (NUM_GPUS=0): $1 trains on the CPU: $updates updates x $tokens tokens x update-freq $freq, about $(awk -v t="$total" 'BEGIN { printf (t >= 1e9 ? "%.1fB" : "%.0fM"), (t >= 1e9 ? t / 1e9 : t / 1e6) }') target tokens: roughly $(duration $((total / hi)) $((total / lo))) or more at $CPU_WPS target tokens/s (the speed of a 3-3 256-wide Transformer on 2 CPU cores; bigger models are slower)"
  if [[ "$SMALL" != 1 ]]; then
    log "  SMALL=1 runs a plan a CPU finishes instead (at most $SMALL_MAX_UPDATE updates of $SMALL_MAX_TOKENS tokens, update-freq 1: examples/common/README.md)"
  fi
}

# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------

dense_dir() { echo "$SAVE_ROOT/$DATASET/transformer-$1-$2"; }

# fit SAVE_DIR [model flags...]: fairseq-train with TRAIN_FLAGS (set by the family) into
# SAVE_DIR unless it finished before (SMALL=1: the small plan, see small_flags; NUM_GPUS=0: a
# warning with the plan and a time estimate first, see cpu_warning). DATA_CHECK names the file
# of DATA_BIN that must exist
# (default dict.$SRC.txt). Set FINETUNE_FROM to start from converted weights (fairseq's
# --finetune-from-model: used only on the first launch, with fresh optimizer, scheduler, meters
# and data loader; an interrupted run resumes from its own checkpoint_last.pt).
fit() {
  local save_dir="$1"
  shift
  if [[ "$DRY_RUN" != 1 && -f "$save_dir/train.done" ]]; then
    log "$save_dir: trained before (remove $save_dir/train.done to train again)"
    return 0
  fi
  [[ "$DRY_RUN" == 1 || -f "$DATA_BIN/${DATA_CHECK:-dict.$SRC.txt}" ]] ||
    die "no binarized data in $DATA_BIN (run the prepare-*.sh script first, or set DATA_BIN)"
  local init=()
  if [[ -n "${FINETUNE_FROM:-}" ]]; then
    init=(--finetune-from-model "$FINETUNE_FROM")
  fi
  FIT_ARGS=("$@" "${init[@]}" "${TRAIN_FLAGS[@]}")
  small_flags "$save_dir"
  cpu_warning "$save_dir"
  if [[ "$DRY_RUN" == 1 ]]; then
    run_log "$save_dir/train.log" fairseq-train "$DATA_BIN" --user-dir "$(user_dir)" \
      --save-dir "$save_dir" "${FIT_ARGS[@]}"
    ROW_TRAIN=(fairseq-train "$DATA_BIN" --user-dir "$(user_dir)" --save-dir "$save_dir"
      "${FIT_ARGS[@]}")
    return 0
  fi
  # one training per save directory (a second is refused with the live one's pid), and
  # stopping the recipe ends its training: it runs in the background and is waited for, so
  # that the INT/TERM trap runs at once (bash runs it only after a foreground child ends)
  mkdir -p "$save_dir"
  local lock_fd
  exec {lock_fd}>>"$save_dir/train.lock"
  if ! flock -n "$lock_fd"; then
    die "another training (pid $(cat "$save_dir/train.pid" 2>/dev/null || echo '?')) is running in $save_dir; stop it first or wait for it"
  fi
  echo $$ >"$save_dir/train.pid"
  trap lib_stop INT TERM
  local rc=0
  run_log "$save_dir/train.log" fairseq-train "$DATA_BIN" --user-dir "$(user_dir)" \
    --save-dir "$save_dir" "${FIT_ARGS[@]}" &
  wait $! || rc=$?
  exec {lock_fd}>&-
  ((rc == 0)) || die "fairseq-train failed (exit $rc); see $save_dir/train.log"
  touch "$save_dir/train.done"
}

# row_config: the row's config, configs/<recipe folder>/<script name, '-' -> '_'>.yaml
# (scripts/make_configs.py writes it from the row's last training; tests/test_configs.py keeps
# them equal).
row_config() {
  local script="$0" folder name
  folder="${script%/*}"
  [[ "$folder" != "$script" ]] || folder=.
  folder="$(cd "$folder" && pwd)"
  name="${script##*/}"
  name="${name%.sh}"
  echo "$REPO_ROOT/configs/${folder##*/}/${name//-/_}.yaml"
}

# row_config_note: at the end of a dry run, the row's training (its last fit) as its config
# and the hydra overrides that give the same training (the run's paths, the device, what the
# environment changed): examples/common/config_overrides.py.
ROW_TRAIN=()
row_config_note() {
  local rc=$? config
  ((rc == 0 && ${#ROW_TRAIN[@]} > 0)) || return "$rc"
  config="$(row_config)"
  [[ -f "$config" ]] || return 0
  echo "  (this row's training from its config $config:"
  if have_python; then
    echo "   $("$PYTHON" -c "$(<"$COMMON_DIR/config_overrides.py")" "$config" "${ROW_TRAIN[@]}"))"
  else
    echo "   python is needed to list the overrides)"
  fi
}
if [[ "$DRY_RUN" == 1 ]]; then
  trap row_config_note EXIT
fi

# lib_stop: the INT/TERM trap of a script that trains (every recipe's fit, run.sh): its own
# descendants end (listed first, signalled at once: a lane killed before its training could start
# the next step, a training killed before its lane would be orphaned), not its process group,
# then the script exits 130
lib_descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$child"
    lib_descendants "$child"
  done
}
lib_stop() {
  trap - INT TERM
  log "stopped: ending the trainings (run the same command to resume)"
  local pids
  pids="$(lib_descendants $$)"
  # shellcheck disable=SC2086
  [[ -z "$pids" ]] || kill -TERM $pids 2>/dev/null || true
  exit 130
}

# average SAVE_DIR: average the last AVG_N checkpoints into SAVE_DIR/checkpoint_avg.pt (SMALL=1:
# those there are, when fewer). Ours: fairseq's own averager is a script of its repository, not
# part of the installed fairseq package.
average() {
  local save_dir="$1" how few=()
  if [[ "$AVG_MODE" == epoch ]]; then how=--num-epoch-checkpoints; else how=--num-update-checkpoints; fi
  if [[ "$SMALL" == 1 ]]; then few=(--allow-fewer); fi
  run "$PYTHON" "$REPO_ROOT/examples/translation/lightformer/average_checkpoints.py" \
    --inputs "$save_dir" "$how" "$AVG_N" --output "$save_dir/checkpoint_avg.pt" "${few[@]}"
}

# hyp_ref GEN_OUT: write GEN_OUT.hyp / GEN_OUT.ref (detokenized BPE-free text, in test order).
hyp_ref() {
  local gen="$1" tag
  for tag in H T; do
    local out="$gen.ref" field=2
    if [[ "$tag" == H ]]; then out="$gen.hyp" field=3; fi
    grep "^$tag-" "$gen" | sed "s/^$tag-//" | sort -t$'\t' -k1,1n | cut -f"$field"- >"$out"
  done
}

# detok LANG < tokenized > detokenized: the Moses detokenizer (MOSES_DIR's perl script when
# MOSES_DIR is set, else the sacremoses command of `pip install sacremoses`).
detok() {
  if [[ -n "$MOSES_DIR" ]]; then
    [[ -f "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" ]] ||
      die "MOSES_DIR=$MOSES_DIR has no scripts/tokenizer/detokenizer.perl"
    perl "$MOSES_DIR/scripts/tokenizer/detokenizer.perl" -q -l "$1"
  else
    command -v sacremoses >/dev/null 2>&1 ||
      die "detokenizing needs the sacremoses command (pip install sacremoses), or MOSES_DIR"
    sacremoses -q -l "$1" -j 1 detokenize
  fi
}

# evaluate SAVE_DIR CHECKPOINT: decode the test set and write SAVE_DIR/results.txt (sacreBLEU in
# its text format, signature included) and, for BLEU, SAVE_DIR/result.json (write_result).
evaluate() {
  local save_dir="$1" ckpt="$2"
  local gen="$save_dir/generate-test.txt" res="$save_dir/results.txt"
  # --required-batch-size-multiple 1: fairseq main drops a last batch that is not a multiple
  # of it (default 8), i.e. up to 7 test sentences
  local bpe=(--remove-bpe)
  if [[ "$BPE_KIND" == sentencepiece ]]; then bpe=(--remove-bpe sentencepiece); fi
  run_to "$gen" fairseq-generate "$DATA_BIN" --user-dir "$(user_dir)" --path "$ckpt" \
    --task translation --source-lang "$SRC" --target-lang "$TGT" --gen-subset test \
    --beam "$BEAM" --lenpen "$LENPEN" --batch-size 128 --required-batch-size-multiple 1 \
    "${bpe[@]}"
  local ref_raw="$DATA_BIN/refs/test.$TGT"
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "  (score: $METRIC of $gen; compound splitting: $COMPOUND_SPLIT; sacreBLEU ref: ${ref_raw} if present)"
    if [[ "$METRIC" == bleu ]]; then write_result "$save_dir" "$ckpt"; fi
    return 0
  fi
  hyp_ref "$gen"
  {
    echo "checkpoint: $ckpt"
    grep -h -m1 'model params' "$save_dir/train.log" 2>/dev/null | sed 's/.*| //' || true
    if [[ "$METRIC" == rouge ]]; then
      local ref="$gen.ref"
      if [[ -f "$ref_raw" ]]; then ref="$ref_raw"; fi
      "$PYTHON" "$REPO_ROOT/examples/summarization/lightformer/score_rouge.py" \
        --hyp "$gen.hyp" --ref "$ref"
    else
      echo "tokenized BLEU (fairseq-generate): $(tail -n 1 "$gen")"
      if [[ "$COMPOUND_SPLIT" == 1 ]]; then
        # compound splitting as fairseq's scripts/compound_split_bleu.sh
        perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' <"$gen.hyp" >"$gen.hyp.cs"
        perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' <"$gen.ref" >"$gen.ref.cs"
        echo "tokenized BLEU (compound split): $(fairseq-score --sys "$gen.hyp.cs" --ref "$gen.ref.cs" | tail -n 1)"
      fi
      detok "$TGT" <"$gen.hyp" >"$gen.hyp.detok"
      local ref="$ref_raw"
      if [[ ! -f "$ref" ]]; then
        detok "$TGT" <"$gen.ref" >"$gen.ref.detok"
        ref="$gen.ref.detok"
      fi
      # sacreBLEU's text format: "BLEU|nrefs:1|case:mixed|...|version:2.6.0 = 34.56 ..."
      echo "sacreBLEU (detokenized, ref $ref): $(sacrebleu "$ref" -i "$gen.hyp.detok" -m bleu -w 2 --format text)"
    fi
  } | tee "$res"
  if [[ "$METRIC" == bleu ]]; then write_result "$save_dir" "$ckpt"; fi
}

# write_result SAVE_DIR CHECKPOINT [SPEED_JSON]: SAVE_DIR/result.json, the one-model result
# scripts/plot_frontier.py reads (scripts/recipe_result.py: params from train.log, BLEU and its
# signature from results.txt, tokens/s from SPEED_JSON when the speed was measured). A failure
# is a warning: results.txt stays the result of record.
write_result() {
  local save_dir="$1" ckpt="$2" speed=() plan=paper
  if [[ -n "${3:-}" ]]; then speed=(--speed-json "$3"); fi
  if [[ "$SMALL" == 1 ]]; then plan=small; fi
  run "$PYTHON" "$REPO_ROOT/scripts/recipe_result.py" --out "$save_dir/result.json" \
    --label "${save_dir##*/}" --results "$save_dir/results.txt" \
    --train-log "$save_dir/train.log" "${speed[@]}" --checkpoint "$ckpt" \
    --dataset "$DATASET" --plan "$plan" ||
    log "warning: could not write $save_dir/result.json (results.txt has the scores)"
}

# speed_column CHECKPOINT BASELINE [ARGS...]: the speed column (scripts/measure_speed.sh:
# tokens/s on one CPU core, batch 1; ARGS are passed on) into CHECKPOINT's folder/speed.txt and
# speed.json (unless ARGS name another --json), then into its result.json (BLEU rows). The
# papers report it as a ratio to the Transformer 6-6: when BASELINE (that model's checkpoint)
# exists (always, in a dry run) both are timed side by side (interleaved runs).
speed_column() {
  local ckpt="$1" base="$2" script="$REPO_ROOT/scripts/measure_speed.sh"
  shift 2
  local paths="model=$ckpt" dir json="" arg prev="" json_flag=()
  dir="$(dirname "$ckpt")"
  [[ "$MEASURE_SPEED" == 1 ]] || return 0
  if [[ "$DRY_RUN" != 1 && ! -x "$script" ]]; then
    log "scripts/measure_speed.sh not found: skipping the speed column"
    return 0
  fi
  if [[ "$ckpt" != "$base" && ("$DRY_RUN" == 1 || -f "$base") ]]; then
    paths="transformer=$base,$paths"
  fi
  for arg in "$@"; do
    if [[ "$prev" == --json ]]; then json="$arg"; fi
    prev="$arg"
  done
  if [[ -z "$json" ]]; then
    json="$dir/speed.json"
    json_flag=(--json "$json")
  fi
  run_log "$dir/speed.txt" "$script" --path "$paths" --data "$DATA_BIN" \
    --user-dir "$(user_dir)" --src-len "$SPEED_SRC_LEN" --beam "$BEAM" --lenpen "$LENPEN" \
    "${json_flag[@]}" "$@"
  if [[ "${METRIC:-}" == bleu && ("$DRY_RUN" == 1 || -f "$dir/results.txt") ]]; then
    write_result "$dir" "$ckpt" "$json"
  fi
}
