"""fairseq criterions of lightcompress.

Every module of this package is imported here (fairseq also imports them by path when the
plugin is given as ``--user-dir``), so that ``import lightcompress.plugin`` registers all of them.
"""

import importlib
import os

for _file in sorted(os.listdir(os.path.dirname(__file__))):
    if _file.endswith(".py") and not _file.startswith("_"):
        importlib.import_module(f"{__name__}.{_file[:-3]}")
