"""``python -m lightcompress_runtime EXPORT [options] < in > out``: an export's ``translate.py``."""

import sys

from .translator import main

sys.exit(main(prog=f"python -m {__package__}"))
