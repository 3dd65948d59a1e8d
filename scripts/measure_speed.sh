#!/usr/bin/env bash
# Translation speed (tokens/s) on the papers' CPU protocol (Hypoformer A.4, LightFormer 4.3):
# 50 sentences of the average length, batch 1, one thread, beam 5, 10 runs, fastest and slowest
# 10 % dropped, mean of the rest; several models side by side (interleaved runs).
#
#   scripts/measure_speed.sh --data data-bin/iwslt14.de-en --path base=a.pt,lf=b.pt --bleu --remove-bpe
#   scripts/measure_speed.sh --arch transformer_iwslt_de_en,12-2=transformer_iwslt_de_en:--encoder-layers=12:--decoder-layers=2 \
#       --vocab-size 10200 --compare-int8 --json speed.json
#
# All options: scripts/measure_speed.sh --help (python -m lightcompress.measure.speed).
# PYTHON picks the interpreter (default: .venv/bin/python of this checkout, else python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
# One thread unless told otherwise: the protocol measures a single CPU core.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-$OMP_NUM_THREADS}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

exec "$PYTHON" -m lightcompress.measure.speed "$@"
