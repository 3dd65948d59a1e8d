#!/usr/bin/env bash
# Sequence-level KD data (see scripts/distill_data.py --help):
#   scripts/distill_data.sh DATA_BIN --path teacher.pt --out-dir DATA_BIN.kd [--cpu] [...]
# Progress (shard i/N, sentences done, elapsed) goes to stderr every --progress-interval seconds
# (default 30). PYTHON selects the interpreter (default: python of the active environment).
set -euo pipefail
PYTHON=${PYTHON:-python}
exec "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/distill_data.py" "$@"
