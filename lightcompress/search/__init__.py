"""Smartformer's rank search inside ``fairseq-train`` (the task ``translation_smartformer``).

- :mod:`.agent`: the architecture encoder (layer tokens -> BiLSTM) and the A2C agent;
- :mod:`.rank_search`: importance accumulation, decisions, rewards, checkpointable state;
- :mod:`.optim`: rebuilding fairseq's optimizer after CP factors were replaced.
"""

from lightcompress.search.agent import A2CAgent, ArchitectureEncoder, layer_token
from lightcompress.search.optim import replace_parameters
from lightcompress.search.rank_search import (
    Decision,
    RankSearch,
    SearchConfig,
    SearchLayer,
    cp_rank_bound,
    find_search_layers,
    reward,
)

__all__ = [
    "A2CAgent",
    "ArchitectureEncoder",
    "Decision",
    "RankSearch",
    "SearchConfig",
    "SearchLayer",
    "cp_rank_bound",
    "find_search_layers",
    "layer_token",
    "replace_parameters",
    "reward",
]
