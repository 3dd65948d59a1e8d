"""lightcompress: compressed Transformers as a fairseq ``--user-dir`` plugin.

``fairseq-train DATA --user-dir $(python -m lightcompress --user-dir) --arch lightformer_...``

The package itself is light: importing a part that needs no fairseq (the factorization library
:mod:`lightcompress.modules`, :mod:`lightcompress.io`) imports no fairseq. fairseq's
``--user-dir`` imports the package with fairseq loaded, and then the package registers every
model, architecture, task and criterion it provides and allow-lists the types fairseq
checkpoints hold for torch's ``weights_only`` loader (:mod:`lightcompress.plugin`); a program of
its own does the same with ``import lightcompress.plugin``.
"""

import sys

if (
    sys.modules.get("fairseq") is not None
):  # fairseq's --user-dir (or a program that loaded fairseq first)
    from lightcompress import plugin  # noqa: F401  (registration)

__version__ = "0.1.0"
