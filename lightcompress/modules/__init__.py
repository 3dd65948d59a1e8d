"""Factorized layers, embeddings, layer sharing and the compression spec (plain PyTorch).

Nothing in this package imports fairseq.
"""

from lightcompress.errors import SpecError
from lightcompress.modules.counting import count_parameters
from lightcompress.modules.cp import CPLinear, cp_factors, cp_to_dense
from lightcompress.modules.embeddings import HTTEmbedding, LowRankEmbedding
from lightcompress.modules.fused_qkv import FusedQKV  # (registers the qkv variants)
from lightcompress.modules.hybrid import HybridLinear, dense_columns
from lightcompress.modules.lowrank import (
    LowRankLinear,
    energy_rank,
    ratio_rank,
    resolve_rank,
    svd_factors,
)
from lightcompress.modules.registry import (
    KINDS,
    Shape,
    canonical_kind,
    get_variant,
    register,
)
from lightcompress.modules.sharing import (
    all_except_last,
    all_shared,
    count_unique_params,
    every_k,
    group_schedule,
    num_unique,
    sandwich_schedule,
    tie_layers,
)
from lightcompress.modules.spec import CompressionSpec, SpecPlan
from lightcompress.modules.spec_grammar import Rule
from lightcompress.modules.spec_report import CompressionReport, ReplacementRecord, count_params
from lightcompress.modules.tensor_train import (
    TTLinear,
    factorize_dim,
    max_tt_ranks,
    pad_factorize,
    tt_svd,
    tt_to_dense,
)

__all__ = [
    "KINDS",
    "CPLinear",
    "CompressionReport",
    "CompressionSpec",
    "FusedQKV",
    "HTTEmbedding",
    "HybridLinear",
    "LowRankEmbedding",
    "LowRankLinear",
    "ReplacementRecord",
    "Rule",
    "Shape",
    "SpecError",
    "SpecPlan",
    "TTLinear",
    "all_except_last",
    "all_shared",
    "canonical_kind",
    "count_parameters",
    "count_params",
    "count_unique_params",
    "cp_factors",
    "cp_to_dense",
    "dense_columns",
    "energy_rank",
    "every_k",
    "factorize_dim",
    "get_variant",
    "group_schedule",
    "max_tt_ranks",
    "num_unique",
    "pad_factorize",
    "ratio_rank",
    "register",
    "resolve_rank",
    "sandwich_schedule",
    "svd_factors",
    "tie_layers",
    "tt_svd",
    "tt_to_dense",
]
