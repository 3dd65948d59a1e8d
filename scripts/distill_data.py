#!/usr/bin/env python
"""Sequence-level KD data: translate the train split with a teacher and binarize the result.

    python scripts/distill_data.py DATA_BIN --path teacher.pt --out-dir DATA_BIN.kd \\
        --user-dir lightcompress --beam 5 --lenpen 1.0 --max-tokens 8000 [--cpu] [--num-shards 8]

Resumable (rerun the same command after an interruption), order-preserving, verified; see
``lightcompress/kd/distill.py`` for the details and ``examples/translation/kd/README.md``.
"""

import os
import sys

# Use the checkout's package when run from a clone (scripts/ is not a package).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lightcompress.kd.distill import cli_main

if __name__ == "__main__":
    sys.exit(cli_main())
