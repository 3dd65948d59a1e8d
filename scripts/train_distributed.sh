#!/usr/bin/env bash
# Data-parallel fairseq-train on N workers (docs/distributed.md):
#   NPROC=2 scripts/train_distributed.sh DATA_BIN --user-dir lightcompress --arch lightformer_iwslt_de_en ...
# Every argument goes to fairseq-train unchanged; this script adds the distributed flags.
#
# --help prints this text, then the launcher's options (cpu) or fairseq-train's (gpu).
#
# DEVICE=cpu (default)  NPROC processes on this machine, gloo backend, one fairseq-train per rank
#                       (lightcompress/distributed.py: if a rank dies, the others are stopped and
#                       the script exits non-zero naming the rank; rerun to resume). The ranks
#                       end with the launcher (kill -9 included); a second run on the same
#                       --save-dir is refused while one is live (SAVE_DIR/.lightcompress-train.lock).
# DEVICE=gpu            fairseq's own multi-GPU path: one fairseq-train spawning NPROC processes
#                       (NCCL); NPROC defaults to the visible GPUs. Multi-node: see the docs.
# NPROC                 workers (cpu default 2)
# PORT                  cpu: rendezvous port on 127.0.0.1 (default: a free one); a port in use
#                       is refused before any rank starts
# TIMEOUT               cpu: stop all ranks after this many seconds (default: no limit)
# HEARTBEAT_TIMEOUT     fairseq --heartbeat-timeout: a rank that makes no progress for this many
#                       seconds is killed (default 300; 0 disables)
# EFFECTIVE_TOKENS      tokens per update to keep (adds --update-freq); or instead
# REFERENCE_GPUS        workers of the reference setup, with REFERENCE_MAX_TOKENS (default: your
#                       --max-tokens) and REFERENCE_UPDATE_FREQ (default 1):
#                       update_freq = ceil(reference tokens / (NPROC * --max-tokens))
# PYTHON                interpreter with torch + fairseq (default: python of the active env)
# FAIRSEQ_TRAIN         gpu: the fairseq-train command (default: fairseq-train)
# DRY_RUN=1             print the command instead of running it
set -euo pipefail

DEVICE=${DEVICE:-cpu}
PYTHON=${PYTHON:-python}
FAIRSEQ_TRAIN=${FAIRSEQ_TRAIN:-fairseq-train}
HEARTBEAT_TIMEOUT=${HEARTBEAT_TIMEOUT:-300}
LAUNCHER="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lightcompress/distributed.py"

# maybe_exec CMD...: exec it, or print it with DRY_RUN=1
maybe_exec() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '+'
    printf ' %q' "$@"
    echo
    exit 0
  fi
  exec "$@"
}

usage() {  # the comment block at the top of this file
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

if [[ $# -lt 1 ]]; then
  usage >&2
  exit 2
fi

case "$DEVICE" in
  cpu | gpu) ;;
  *) echo "train_distributed.sh: DEVICE must be cpu or gpu, got '$DEVICE'" >&2; exit 2 ;;
esac

for arg in "$@"; do
  if [[ "$arg" == -h || "$arg" == --help ]]; then
    usage
    echo
    if [[ "$DEVICE" == cpu ]]; then
      # the launcher answers --help after -- with its own options and starts no rank
      exec "$PYTHON" "$LAUNCHER" launch -- "$@"
    fi
    echo "DEVICE=gpu: the arguments go to $FAIRSEQ_TRAIN, whose options follow."
    echo
    exec "$FAIRSEQ_TRAIN" "$@"
  fi
done

case "$DEVICE" in
  cpu) NPROC=${NPROC:-2} ;;
  gpu) NPROC=${NPROC:-$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')} ;;
esac
if ! [[ "$NPROC" =~ ^[1-9][0-9]*$ ]]; then
  echo "train_distributed.sh: NPROC must be a positive integer, got '$NPROC'" >&2
  exit 2
fi

args=("$@")
if [[ -n "${EFFECTIVE_TOKENS:-}${REFERENCE_GPUS:-}" ]]; then
  max_tokens=""
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --max-tokens) max_tokens=${args[i + 1]:-} ;;
      --max-tokens=*) max_tokens=${args[i]#--max-tokens=} ;;
      --update-freq | --update-freq=*)
        echo "train_distributed.sh: give --update-freq or EFFECTIVE_TOKENS/REFERENCE_GPUS, not both" >&2
        exit 2 ;;
    esac
  done
  if [[ -z "$max_tokens" ]]; then
    echo "train_distributed.sh: EFFECTIVE_TOKENS/REFERENCE_GPUS need --max-tokens" >&2
    exit 2
  fi
  uf_args=(--gpus "$NPROC" --max-tokens "$max_tokens")
  [[ -n "${EFFECTIVE_TOKENS:-}" ]] && uf_args+=(--effective-tokens "$EFFECTIVE_TOKENS")
  [[ -n "${REFERENCE_GPUS:-}" ]] && uf_args+=(--reference-gpus "$REFERENCE_GPUS")
  [[ -n "${REFERENCE_MAX_TOKENS:-}" ]] && uf_args+=(--reference-max-tokens "$REFERENCE_MAX_TOKENS")
  [[ -n "${REFERENCE_UPDATE_FREQ:-}" ]] && uf_args+=(--reference-update-freq "$REFERENCE_UPDATE_FREQ")
  update_freq=$("$PYTHON" "$LAUNCHER" update-freq "${uf_args[@]}")
  echo "train_distributed.sh: $NPROC workers x $max_tokens tokens x --update-freq $update_freq" \
    "= $((NPROC * max_tokens * update_freq)) tokens per update" >&2
  args+=(--update-freq "$update_freq")
fi

if [[ "$DEVICE" == cpu ]]; then
  launch=(--nproc "$NPROC" --heartbeat-timeout "$HEARTBEAT_TIMEOUT")
  [[ -n "${PORT:-}" ]] && launch+=(--port "$PORT")
  [[ -n "${TIMEOUT:-}" ]] && launch+=(--timeout "$TIMEOUT")
  maybe_exec "$PYTHON" "$LAUNCHER" launch "${launch[@]}" -- "${args[@]}"
fi

# GPU: fairseq spawns one process per GPU (torch.multiprocessing; if one dies, the parent
# stops the others and fails). Not tested here (no GPU on the CI machine).
gpu=(--distributed-world-size "$NPROC")
# every rank reads the checkpoint itself when resuming (fairseq's broadcast of rank 0's state
# is unpickled with weights_only on torch >= 2.6 and fails); needs a filesystem all ranks see
[[ " ${args[*]} " == *" --load-checkpoint-on-all-dp-ranks "* ]] || gpu+=(--load-checkpoint-on-all-dp-ranks)
[[ "$HEARTBEAT_TIMEOUT" != 0 ]] && gpu+=(--heartbeat-timeout "$HEARTBEAT_TIMEOUT")
maybe_exec "$FAIRSEQ_TRAIN" "${args[@]}" "${gpu[@]}"
