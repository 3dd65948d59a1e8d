#!/usr/bin/env bash
# Fetch the wheels lab/results/run.sh installs on a machine without network
# (Python 3.12 with torch, numpy, scikit-learn, sacrebleu and sentencepiece, no fairseq): the hash-pinned
# CPython 3.12 manylinux wheels of wheels-cp312.txt, and antlr4-python3-runtime 4.9.3's
# pure-Python wheel built from its hash-pinned sdist (it has no wheel on PyPI). About 30 MB.
#
#   bash lab/results/fetch-wheels.sh        # -> .whl/results-cp312/
#   ... carry .whl/results-cp312 to the machine, then there:
#   WHEELS=.whl/results-cp312 bash lab/results/run.sh
#
# Environment: OUT (default .whl/results-cp312), PYTHON (a python with pip, default python / python3),
# DRY_RUN=1 (print the commands, download and write nothing). Rerunnable: pip skips wheels
# already in OUT with the right hash.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../../common/lib.sh
source "$HERE/../../examples/common/lib.sh" # run (DRY_RUN), PYTHON
cd "$REPO_ROOT"
OUT="${OUT:-.whl/results-cp312}"
ANTLR="antlr4-python3-runtime==4.9.3 --hash=sha256:f224469b4168294902bb1efa80a8bf7855f24c99aef99cbefc1bcd3cce77881b"
[[ "$DRY_RUN" == 1 ]] || mkdir -p "$OUT"
run "$PYTHON" -m pip download --no-deps --require-hashes --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  --disable-pip-version-check -q -d "$OUT" -r "$HERE/wheels-cp312.txt"
if [[ "$DRY_RUN" == 1 ]]; then
  echo "  (requirement file REQ: $ANTLR)"
  run "$PYTHON" -m pip wheel --no-deps --require-hashes --no-binary=:all: -q -w "$OUT" -r REQ
else
  req="$(mktemp)"
  trap 'rm -f "$req"' EXIT
  echo "$ANTLR" >"$req"
  run "$PYTHON" -m pip wheel --no-deps --require-hashes --no-binary=:all: --disable-pip-version-check \
    -q -w "$OUT" -r "$req"
fi
echo "wheels in $OUT: $(find "$OUT" -maxdepth 1 -name '*.whl' 2>/dev/null | wc -l) files, $(du -sh "$OUT" 2>/dev/null | cut -f1)"
