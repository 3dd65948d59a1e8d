"""fairseq models and named architectures of lightcompress.

Every module of this package is imported here (fairseq also imports them by path when the
plugin is given as ``--user-dir``), so that ``import lightcompress.plugin`` registers all of them:
the families first, in the order their architectures are listed
(``python -m lightcompress --list-archs``), then the rest.
"""

import importlib
import os

_FIRST = ("lightformer", "hypoformer", "smartformer", "subformer", "subformer_lm")

for _name in _FIRST + tuple(
    sorted(
        f[:-3]
        for f in os.listdir(os.path.dirname(__file__))
        if f.endswith(".py") and not f.startswith("_") and f[:-3] not in _FIRST
    )
):
    importlib.import_module(f"{__name__}.{_name}")
