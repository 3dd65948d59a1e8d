"""The bench scripts' tests use the suite's harness (``tests/harness.py``) and its toy-model
helpers, as ``tests/`` does; ``make test-lab`` runs this folder with ``lab/tests``."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

os.environ.setdefault("OMP_NUM_THREADS", "1")
