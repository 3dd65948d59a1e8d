#!/usr/bin/env bash
# Data-parallel fairseq-train on N workers (docs/distributed.md):
#   NPROC=2 scripts/train_distributed.sh DATA_BIN --user-dir lightcompress --arch lightformer_iwslt_de_en ...
# Every argument goes to fairseq-train unchanged; this script adds the distributed flags.
#
# --help prints this text, then fairseq-train's help for the same arguments.
#
# DEVICE=cpu (default)  torchrun (python -m torch.distributed.run) starts NPROC ranks on this
#                       machine, each running lightcompress/distributed.py (fairseq-train, gloo).
#                       If a rank dies, torchrun stops the others and exits non-zero naming it;
#                       rerun to resume. The ranks end with torchrun (kill -9 included); a second
#                       run on the same --save-dir is refused while one is live
#                       (SAVE_DIR/.lightcompress-train.lock, held by rank 0).
# DEVICE=gpu            fairseq's own multi-GPU path: one fairseq-train spawning NPROC processes
#                       (NCCL); NPROC defaults to the visible GPUs. Multi-node: see the docs.
# NPROC                 workers on this machine (cpu default 2)
# NNODES                cpu: machines (default 1). With more than one, run the same command on
#                       every machine with RDZV_ENDPOINT=HOST:PORT (a machine of the job that
#                       all reach; torchrun's c10d rendezvous) and the same RDZV_ID
# RDZV_ENDPOINT         cpu, NNODES > 1: HOST:PORT of torchrun's rendezvous store (required)
# RDZV_ID               cpu, NNODES > 1: the job's name at the rendezvous (default: lightcompress)
# PORT                  cpu, one machine: rendezvous port on 127.0.0.1 (default: torchrun picks a
#                       free one); a port in use is refused before any rank starts
# TIMEOUT               cpu: stop all ranks after this many seconds (default: no limit)
# HEARTBEAT_TIMEOUT     fairseq --heartbeat-timeout: a rank that makes no progress for this many
#                       seconds is killed (default 300; 0 disables)
# EFFECTIVE_TOKENS      tokens per update to keep (adds --update-freq); or instead
# REFERENCE_GPUS        workers of the reference setup, with REFERENCE_MAX_TOKENS (default: your
#                       --max-tokens) and REFERENCE_UPDATE_FREQ (default 1):
#                       update_freq = ceil(reference tokens / (NNODES x NPROC x --max-tokens))
# PYTHON                interpreter with torch + fairseq (default: python of the active env)
# FAIRSEQ_TRAIN         gpu: the fairseq-train command; also answers --help (default: fairseq-train)
# DRY_RUN=1             print the command instead of running it
set -euo pipefail

DEVICE=${DEVICE:-cpu}
PYTHON=${PYTHON:-python}
FAIRSEQ_TRAIN=${FAIRSEQ_TRAIN:-fairseq-train}
HEARTBEAT_TIMEOUT=${HEARTBEAT_TIMEOUT:-300}
NNODES=${NNODES:-1}
# the rank entry torchrun runs (tests: LC_DIST_WORKER=tests/faults.py, which wraps it)
ENTRY="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lightcompress/distributed.py"
WORKER=${LC_DIST_WORKER:-$ENTRY}

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

die() {
  echo "train_distributed.sh: error: $*" >&2
  exit 2
}

if [[ $# -lt 1 ]]; then
  usage >&2
  exit 2
fi

case "$DEVICE" in
  cpu | gpu) ;;
  *) die "DEVICE must be cpu or gpu, got '$DEVICE'" ;;
esac

for arg in "$@"; do
  if [[ "$arg" == -h || "$arg" == --help ]]; then
    usage
    echo
    echo "The arguments go to $FAIRSEQ_TRAIN, whose options follow."
    echo
    exec "$FAIRSEQ_TRAIN" "$@"
  fi
done

case "$DEVICE" in
  cpu) NPROC=${NPROC:-2} ;;
  gpu) NPROC=${NPROC:-$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')} ;;
esac
[[ "$NPROC" =~ ^[1-9][0-9]*$ ]] || die "NPROC must be a positive integer, got '$NPROC'"
[[ "$NNODES" =~ ^[1-9][0-9]*$ ]] || die "NNODES must be a positive integer, got '$NNODES'"
if ((NNODES > 1)); then
  [[ "$DEVICE" == cpu ]] || die "NNODES is for DEVICE=cpu; for GPUs on several machines see docs/distributed.md"
  [[ -n "${RDZV_ENDPOINT:-}" ]] || die "NNODES=$NNODES needs RDZV_ENDPOINT=HOST:PORT (the same on every machine)"
  [[ -z "${PORT:-}" ]] || die "PORT is for one machine; with NNODES give the port in RDZV_ENDPOINT=HOST:PORT"
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
  workers=$((NNODES * NPROC))
  uf_args=(--gpus "$workers" --max-tokens "$max_tokens")
  [[ -n "${EFFECTIVE_TOKENS:-}" ]] && uf_args+=(--effective-tokens "$EFFECTIVE_TOKENS")
  [[ -n "${REFERENCE_GPUS:-}" ]] && uf_args+=(--reference-gpus "$REFERENCE_GPUS")
  [[ -n "${REFERENCE_MAX_TOKENS:-}" ]] && uf_args+=(--reference-max-tokens "$REFERENCE_MAX_TOKENS")
  [[ -n "${REFERENCE_UPDATE_FREQ:-}" ]] && uf_args+=(--reference-update-freq "$REFERENCE_UPDATE_FREQ")
  update_freq=$("$PYTHON" "$ENTRY" update-freq "${uf_args[@]}")
  echo "train_distributed.sh: $workers workers x $max_tokens tokens x --update-freq $update_freq" \
    "= $((workers * max_tokens * update_freq)) tokens per update" >&2
  args+=(--update-freq "$update_freq")
fi
# fairseq's --heartbeat-timeout (its default -1: none), unless given
if [[ " ${args[*]} " != *" --heartbeat-timeout"[\ =]* && "$HEARTBEAT_TIMEOUT" != 0 ]]; then
  args+=(--heartbeat-timeout "$HEARTBEAT_TIMEOUT")
fi

if [[ "$DEVICE" == cpu ]]; then
  # torchrun: no restart (rerun resumes), one rank entry per process (it adds the gloo flags)
  run=("$PYTHON" -m torch.distributed.run --nproc-per-node "$NPROC" --max-restarts 0)
  if ((NNODES > 1)); then
    run+=(--nnodes "$NNODES" --rdzv-backend c10d --rdzv-endpoint "$RDZV_ENDPOINT"
      --rdzv-id "${RDZV_ID:-lightcompress}")
  elif [[ -n "${PORT:-}" ]]; then
    [[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT >= 1 && PORT <= 65535)) \
      || die "PORT must be a TCP port (1-65535), got '$PORT'"
    if [[ "${DRY_RUN:-0}" != 1 ]] && (: </dev/tcp/127.0.0.1/"$PORT") 2>/dev/null; then
      die "PORT $PORT on 127.0.0.1 is in use (another training run's rendezvous?): free it," \
        "or choose another PORT (leave it unset and torchrun picks a free one)"
    fi
    run+=(--master-addr 127.0.0.1 --master-port "$PORT")
  else
    run+=(--standalone)
  fi
  if [[ -n "${TIMEOUT:-}" ]]; then
    [[ "$TIMEOUT" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "TIMEOUT must be a number of seconds, got '$TIMEOUT'"
    export LC_DIST_TIMEOUT="$TIMEOUT"
  fi
  maybe_exec "${run[@]}" "$WORKER" "${args[@]}"
fi

# GPU: fairseq spawns one process per GPU (torch.multiprocessing; if one dies, the parent
# stops the others and fails). Not tested here (no GPU on the CI machine).
gpu=(--distributed-world-size "$NPROC")
# every rank reads the checkpoint itself when resuming (fairseq's broadcast of rank 0's state
# is unpickled with weights_only on torch >= 2.6 and fails); needs a filesystem all ranks see
[[ " ${args[*]} " == *" --load-checkpoint-on-all-dp-ranks "* ]] || gpu+=(--load-checkpoint-on-all-dp-ranks)
maybe_exec "$FAIRSEQ_TRAIN" "${args[@]}" "${gpu[@]}"
