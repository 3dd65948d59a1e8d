"""lightcompress: compressed Transformers as a fairseq ``--user-dir`` plugin.

``fairseq-train DATA --user-dir $(python -m lightcompress --user-dir) --arch lightformer_...``

Importing the package registers every model, architecture, task and criterion it provides and
allow-lists the types fairseq checkpoints hold for torch's ``weights_only`` loader.
"""

from lightcompress.compat import allow_fairseq_checkpoints

allow_fairseq_checkpoints()

try:
    import fairseq  # noqa: F401
except ImportError as exc:  # pragma: no cover - environment problem
    raise ImportError(
        "lightcompress needs fairseq. Install it with `make install`, or by hand: "
        "`pip install --no-deps --require-hashes -r requirements/fairseq.txt` "
        "(see README, 'Installing')."
    ) from exc

from lightcompress import criterions, models, tasks  # noqa: F401  (registration)
from lightcompress.compat import report_config_errors

report_config_errors()

__version__ = "0.1.0"
