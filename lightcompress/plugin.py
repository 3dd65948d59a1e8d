"""The plugin's registration with fairseq: importing this module registers every model,
architecture, task and criterion of lightcompress and allow-lists the types fairseq checkpoints
hold for torch's ``weights_only`` loader (:mod:`lightcompress.compat`).

fairseq's ``--user-dir`` imports the package while fairseq is loaded, and the package's
``__init__`` then imports this module; everything else of the plugin that loads checkpoints or
builds models imports it itself (``import lightcompress.plugin``), so that a part that needs no
fairseq (:mod:`lightcompress.modules`, :mod:`lightcompress.io`, the runtime) imports none.
"""

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

__all__: list[str] = []
