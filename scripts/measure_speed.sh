#!/usr/bin/env bash
# Translation speed (tokens/s) on the papers' CPU protocol (Hypoformer A.4, LightFormer 4.3):
# 50 sentences of the average length, batch 1, one thread, beam 5, 10 runs, fastest and slowest
# 10 % dropped, mean of the rest; several models side by side (interleaved runs).
#
#   scripts/measure_speed.sh --data data-bin/iwslt14.de-en --path base=a.pt,lf=b.pt --bleu --remove-bpe
#   scripts/measure_speed.sh --arch transformer_iwslt_de_en,12-2=transformer_iwslt_de_en:--encoder-layers=12:--decoder-layers=2 \
#       --vocab-size 10200 --compare-int8 --json speed.json
#   scripts/measure_speed.sh --data DATA --path teacher=t.pt,lf=lf.pt --bleu \
#       --onnx --ct2 --int8-large    # ONNX Runtime and CTranslate2 exports side by side
#
# (The project's own benchmarks add the PyTorch fast path, raw-text timing and peak memory:
# python lab/measure/measure_speed.py ... --fast --text SPM --memory.)
#
# All options: scripts/measure_speed.sh --help (python -m lightcompress.measure.speed --help).
# Every argument, checkpoint and output path (--json) is checked before anything is measured;
# a bad one ends the command with one line on stderr and exit status 2.
# PYTHON picks the interpreter (default: .venv/bin/python of this checkout, else python3).
# DRY_RUN=1 prints the command instead of running it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
# One thread unless told otherwise: the protocol measures a single CPU core.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-$OMP_NUM_THREADS}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# Not `python -m lightcompress.measure.speed`: that imports the package (and fairseq, which logs
# INFO lines while it is imported) before cli_main can silence fairseq's logging, so an error
# would not be the one line on stderr it is meant to be.
if [[ "${DRY_RUN:-0}" == 1 ]]; then  # print the command, run and write nothing
  printf '+'
  printf ' %q' "$PYTHON" -m lightcompress.measure.speed "$@"
  echo
  exit 0
fi
exec "$PYTHON" -c 'import logging, sys
logging.disable(logging.WARNING)
sys.argv[0] = "measure_speed"
from lightcompress.measure.speed import cli_main
cli_main()' "$@"
