"""The lab's tests (``make test-lab``): the results harness of lab/results/,
the corpus builders and the lab's device scripts. They use the product suite's harness
(``tests/harness.py``) and its session fixtures of tiny models; ``make test`` does not run them."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

os.environ.setdefault("OMP_NUM_THREADS", "1")

_spec = importlib.util.spec_from_file_location(
    "_product_conftest", os.path.join(ROOT, "tests", "conftest.py")
)
_product = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_product)
tiny_data = _product.tiny_data  # (session fixtures: a tiny corpus and a trained Transformer)
tiny_transformer = _product.tiny_transformer
