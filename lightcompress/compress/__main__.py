"""``python -m lightcompress.compress``: the ``lightcompress-compress`` command."""

import sys

from lightcompress.compress.cli import cli_main

sys.exit(cli_main())
