"""lightcompress: compressed Transformers as a fairseq ``--user-dir`` plugin.

``fairseq-train DATA --user-dir $(python -m lightcompress --user-dir) --arch lightformer_...``

Importing the package registers every model, architecture, task and criterion it provides and
allow-lists the types fairseq checkpoints hold for torch's ``weights_only`` loader. Without
fairseq installed only the plain-PyTorch factorization library (:mod:`lightcompress.modules`)
is usable; the fairseq parts raise ImportError when imported (install with ``make install``).
"""

try:
    import fairseq
except ImportError:  # the factorization library (lightcompress.modules) works without it
    fairseq = None

if fairseq is not None:
    from lightcompress.compat import (
        allow_fairseq_checkpoints,
        quiet_shared_parameter_logs,
        report_config_errors,
    )

    allow_fairseq_checkpoints()
    from lightcompress import criterions, models, tasks, wid  # noqa: F401  (registration)

    report_config_errors()
    from lightcompress.hydra_checks import install as install_hydra_checks

    install_hydra_checks()  # fairseq-hydra-train: a config that cannot train is one line
    quiet_shared_parameter_logs()

__version__ = "0.1.0"
