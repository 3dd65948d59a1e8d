#!/usr/bin/env bash
# Sequence-level KD data (see scripts/distill_data.py --help):
#   scripts/distill_data.sh DATA_BIN --path teacher.pt --out-dir DATA_BIN.kd [--cpu] [...]
# Progress (shard i/N, sentences done, elapsed) goes to stderr every --progress-interval seconds
# (default 30). PYTHON selects the interpreter (default: python of the active environment).
# DRY_RUN=1 prints the command instead of running it.
set -euo pipefail
PYTHON=${PYTHON:-python}
if [[ "${DRY_RUN:-0}" == 1 ]]; then  # print the command, run and write nothing
  printf '+'
  printf ' %q' "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/distill_data.py" "$@"
  echo
  exit 0
fi
exec "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/distill_data.py" "$@"
