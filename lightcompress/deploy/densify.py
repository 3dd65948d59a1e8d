"""Multiply out a compressed student: the dense fairseq Transformer that computes what it computes.

A LightFormer (low-rank maps and tables, shared layers), a Smartformer (CP attention maps) or a
Hypoformer without Admin scaling (HTT / TT / low-rank maps, the fused Q/K/V map, attention
without output projection, an HTT table) is fairseq's Transformer whose weights are stored as
factors: every map is an affine map ``x W^T + b`` and every table a ``V x d`` matrix. Multiplied
out, they give fairseq's plain ``transformer`` with the same LayerNorms, positions, flags and
dictionaries, which engines that know only the dense Transformer run (CTranslate2:
``lightcompress-export-ct2`` calls :func:`densify_model` on a student). It is larger than the
student by design (the dense shape), and computes the same model to float rounding.

How each slot is multiplied out (in float64, stored in the model's dtype): a map with
``to_dense()`` (:class:`~lightcompress.modules.LowRankLinear`, ``TTLinear``, ``HybridLinear``,
``CPLinear``) gives ``W``, its output at ``x = 0`` gives ``b``; ``nn.Identity`` (an attention
without output projection) is ``W = I``, ``b = 0``; a fused Q/K/V map
(:class:`~lightcompress.modules.fused_qkv.FusedQKV`) is multiplied out whole and its rows put
back in ``[W_q; W_k; W_v]`` order (the inverse of :func:`fused_rows`); a factorized table gives
``to_dense()`` and the output projection tied to it the matrix its logits use (``U V`` of a
low-rank table, whose padding row is the padding token's logit: the dense model then has an
output projection of its own). Each multiplied-out map is checked against the module's own
forward on random inputs, and the whole dense model against the student on probe pairs
(:func:`~lightcompress.deploy.probes.max_logprob_difference`) and probe translations
(:func:`~lightcompress.deploy.probes.greedy_mismatch`), before it is returned. Layers of a sharing group become equal copies (CTranslate2 stores them once: it
aliases equal variables).

Refused with one line (:class:`DensifyError`): what is not a fairseq Transformer
encoder-decoder (Subformer's SAFE and sandwich layers, language models), layers that are not
fairseq's (DA-WID's per-layer widths and masks), Admin residual scaling (``residual * omega``
has no place in the dense Transformer), decoder input / output projections, and any module
with no dense equivalent (no ``to_dense()``, or one that does not reproduce its forward) or any
parameter of the student that no slot of the dense Transformer holds.

:func:`densify_checkpoint` writes the dense model as a fairseq checkpoint (``arch
transformer``: fairseq's own model class, the student's task configuration; atomically), which
``fairseq-generate`` and ``scripts/measure_speed.sh`` load as any fairseq Transformer (with torch's
``weights_only`` loader, ``--user-dir`` for the allow-list of fairseq's checkpoint types, as for
every checkpoint); ``python -m lightcompress.deploy.densify --path STUDENT.pt --data DATA-BIN -o
DENSE.pt`` runs it.
"""

from __future__ import annotations

import argparse
import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from lightcompress import cli
from lightcompress.deploy.dense_structure import (  # (ct2 imports them from here too)
    is_dense_slot,
    model_slots,
    structure_error,
)
from lightcompress.deploy.probes import (
    TOLERANCE,
    ProbeMismatch,
    greedy,
    greedy_mismatch,
    max_logprob_difference,
    probe_pairs,
)
from lightcompress.errors import LightcompressError

__all__ = [
    "Densified",
    "DensifyError",
    "cli_main",
    "densify_checkpoint",
    "densify_model",
    "is_dense_slot",
    "main",
    "model_namespace",
    "model_slots",
    "structure_error",
]


class DensifyError(LightcompressError, ValueError):
    """A model that cannot be multiplied out into a dense Transformer (one line for the user)."""


def model_namespace(model_args) -> argparse.Namespace:
    """A plain Namespace copy of a checkpoint's model configuration (``args`` or ``cfg.model``)."""
    if isinstance(model_args, argparse.Namespace):
        return argparse.Namespace(**vars(model_args))
    from omegaconf import OmegaConf

    return argparse.Namespace(**OmegaConf.to_container(model_args, resolve=True))


# --------------------------------------------------------------------------------------------
# multiplying out one slot
# --------------------------------------------------------------------------------------------


def _f64(module: nn.Module) -> nn.Module:
    """A float64 copy in eval mode (the products multiplied out in float64)."""
    return copy.deepcopy(module).to(torch.float64).eval()


def _check_affine(path: str, module, fn, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """``fn(x) == x W^T + b`` on random inputs, to float64 rounding (else the module is not
    the map its ``to_dense()`` says)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, weight.shape[1], generator=gen, dtype=torch.float64)
    y = fn(x)
    want = x @ weight.t() + bias
    err = float((y - want).abs().max())
    scale = 1.0 + float(want.abs().max())
    if not err <= 1e-8 * scale:
        raise DensifyError(
            f"{path} ({type(module).__name__}) does not multiply out to one matrix: its "
            f"to_dense() differs from its forward by {err:.3g}; it has no dense equivalent"
        )


def _dense_form(path: str, module, what: str, shaped: bool = True):
    """A float64 copy of ``module``, which must have a ``to_dense()`` (and be ``shaped``): a
    :class:`DensifyError` naming the dense ``what`` (equivalent, table) it lacks otherwise."""
    if not callable(getattr(module, "to_dense", None)) or not shaped:
        raise DensifyError(
            f"{path} is a {type(module).__name__}, which has no dense {what} (no to_dense()): "
            "it cannot be multiplied out into the dense Transformer"
        )
    return _f64(module)


def _affine(path: str, module) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, b)`` in float64 of a map slot: ``(out, in)`` and ``(out,)``."""
    if type(module) is nn.Linear:
        w = module.weight.detach().double()
        b = module.bias.detach().double() if module.bias is not None else w.new_zeros(w.shape[0])
        return w, b
    if module is None:
        raise DensifyError(f"{path} is missing: the slot of the dense Transformer is empty")
    m = _dense_form(path, module, "equivalent", hasattr(module, "in_features"))
    with torch.no_grad():
        w = m.to_dense().detach()
        if w.shape != (m.out_features, m.in_features):
            raise DensifyError(
                f"{path} ({type(module).__name__}): to_dense() is {tuple(w.shape)}, not "
                f"(out, in) = {(m.out_features, m.in_features)}"
            )
        b = m(w.new_zeros(1, m.in_features)).reshape(-1)
        _check_affine(path, module, m, w, b)
    return w, b


def _fused_qkv(path: str, fused) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[(W_q, b_q), (W_k, b_k), (W_v, b_v)]`` of a fused Q/K/V map."""
    from lightcompress.modules.fused_qkv import FusedQKV, fused_rows

    if not isinstance(fused, FusedQKV):
        raise DensifyError(
            f"{path} is a {type(fused).__name__}, not a FusedQKV: no dense equivalent known"
        )
    d = fused.dim
    w_fused, b_fused = _affine(f"{path}.proj", fused.proj)
    rows = fused_rows(fused.num_dense, d)
    w, b = torch.empty_like(w_fused), torch.empty_like(b_fused)
    w[rows], b[rows] = w_fused, b_fused  # the fused layout back to [W_q; W_k; W_v]
    out = [(w[i * d : (i + 1) * d], b[i * d : (i + 1) * d]) for i in range(3)]
    m = _f64(fused)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, d, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        for name, y, (wi, bi) in zip("qkv", m(x), out):
            _check_affine(f"{path} ({name})", fused, lambda _x, y=y: y, wi, bi)
    return out


def _table(path: str, emb) -> torch.Tensor:
    """The ``(V, d)`` table of an embedding slot, float64."""
    if type(emb) is nn.Embedding:
        return emb.weight.detach().double()
    m = _dense_form(path, emb, "table")
    with torch.no_grad():
        table = m.to_dense().detach()
        # lookups of the first rows, the padding row and a random sample (not the whole table)
        gen = torch.Generator().manual_seed(0)
        rows = table.shape[0]
        tokens = torch.cat(
            [torch.arange(min(rows, 64)), torch.randint(rows, (256,), generator=gen)]
        )
        if getattr(emb, "padding_idx", None) is not None:
            tokens = torch.cat([tokens, torch.tensor([emb.padding_idx])])
        err = float((m(tokens) - table[tokens]).abs().max())
    if not err <= 1e-8 * (1.0 + float(table.abs().max())):
        raise DensifyError(
            f"{path} ({type(emb).__name__}): its lookups differ from its to_dense() table by "
            f"{err:.3g}; it has no dense equivalent"
        )
    return table


def _output(proj) -> torch.Tensor:
    """The ``(V, d)`` weight of the decoder's output projection, float64."""
    from lightcompress.integration import TiedOutputProjection
    from lightcompress.modules.registry import two_factors

    path = "decoder.output_projection"
    if type(proj) is nn.Linear:
        if proj.bias is not None:
            raise DensifyError(f"{path} has a bias: fairseq's Transformer output has none")
        return proj.weight.detach().double()
    if not isinstance(proj, TiedOutputProjection):
        raise DensifyError(
            f"{path} is a {type(proj).__name__} (an adaptive softmax?): the dense Transformer's "
            "output projection is one matrix"
        )
    emb = _f64(proj.embedding)
    with torch.no_grad():
        factors = two_factors(emb)
        # what TiedOutputProjection computes: (x V^T) U^T for a low-rank table (its padding
        # row is the padding token's logit), else x E^T with the table (padding row zero)
        w = factors[1] @ factors[0] if factors is not None else _table(path, proj.embedding)
        w = w.detach()
        tied = TiedOutputProjection(emb)
        _check_affine(path, proj, tied, w, w.new_zeros(w.shape[0]))
    return w


# --------------------------------------------------------------------------------------------
# the dense model
# --------------------------------------------------------------------------------------------


@dataclass
class Densified:
    """A student multiplied out.

    Attributes
    ----------
    model : TransformerModel
        fairseq's dense Transformer, in eval mode.
    args : argparse.Namespace
        Its model configuration (``arch`` ``transformer``), for a checkpoint or CTranslate2's
        converter.
    maps : list of (str, str)
        ``(path, class name)`` of every slot that was multiplied out (empty: already dense).
    params : int
        The student's (unique) parameter count.
    dense_params : int
        The dense model's (unique) parameter count.
    max_logprob_difference : float
        Largest difference of a per-token log-probability between the two on the probe pairs.
    translations : dict
        Greedy probe translations: ``{"sentences", "equal", "near_ties"}``.
    """

    model: nn.Module
    args: argparse.Namespace
    maps: list = field(default_factory=list)
    params: int = 0
    dense_params: int = 0
    max_logprob_difference: float = 0.0
    translations: dict = field(default_factory=dict)

    def summary(self) -> str:
        """One line: what was multiplied out and the sizes."""
        kinds = sorted({name for _, name in self.maps})
        return (
            f"multiplied out {len(self.maps)} factorized maps ({', '.join(kinds)}): "
            f"{self.params:,} parameters -> {self.dense_params:,} in the dense Transformer"
        )


def _tie_output(weights: dict, pad: int, tie_all: bool) -> bool:
    """Whether one matrix serves as the decoder's table and its output projection (then the
    dense model ties them, as the student does): the two equal in every row but the padding
    token's. A low-rank table tied to the output has a zero padding row for lookups and the
    padding token's logit row ``u[pad] V`` for the output; the table then takes the output's
    row, which no lookup reads (fairseq zeroes padded source positions and masks padding in
    attention, CTranslate2 masks by length), so that the dense export stores the table once."""
    out_w, table = (
        weights["decoder.output_projection.weight"],
        weights["decoder.embed_tokens.weight"],
    )
    if out_w.shape != table.shape:
        return False
    rows = torch.ones(out_w.shape[0], dtype=torch.bool)
    if 0 <= pad < out_w.shape[0]:
        rows[pad] = False
    if not torch.equal(out_w.float()[rows], table.float()[rows]):
        return False
    weights["decoder.embed_tokens.weight"] = out_w
    if tie_all:
        weights["encoder.embed_tokens.weight"] = out_w
    return True


def _dense_args(model_args, tie_all: bool, tie_out: bool) -> argparse.Namespace:
    """The dense model's configuration: the student's, as fairseq's ``transformer``."""
    args = model_namespace(model_args)
    args.arch = "transformer"
    if hasattr(args, "_name"):
        args._name = "transformer"
    args.share_all_embeddings = tie_all and tie_out
    args.share_decoder_input_output_embed = tie_out
    # the tables are the student's (no pretrained vectors to read); no Admin in a Transformer
    args.encoder_embed_path = args.decoder_embed_path = None
    if hasattr(args, "admin_init"):
        args.admin_init = "none"
    for side in ("encoder", "decoder"):
        if hasattr(args, f"lc_{side}_groups"):
            setattr(args, f"lc_{side}_groups", 0)
    return args


def densify_model(model: nn.Module, model_args, task, check: bool = True) -> Densified:
    """The dense fairseq Transformer equivalent to ``model`` (see the module docstring).

    Parameters
    ----------
    model : TransformerModel
        A loaded student (LightFormer, Smartformer, Hypoformer without Admin, or any plugin
        Transformer whose maps have ``to_dense()``); left unchanged.
    model_args : Namespace or DictConfig
        Its model configuration (a checkpoint's ``args`` / ``cfg.model``).
    task
        Anything with ``source_dictionary`` / ``target_dictionary`` (its dictionaries).
    check : bool
        Prove the dense model against ``model`` on probe pairs and probe translations
        (:data:`~lightcompress.deploy.probes.TOLERANCE`); raises :class:`DensifyError` when it
        computes another model.

    Returns
    -------
    Densified
    """
    from lightcompress.build import build_model_without_data
    from lightcompress.modules import count_unique_params

    spec = model_namespace(model_args)
    arch = getattr(spec, "arch", None) or getattr(spec, "_name", None) or "?"
    message = structure_error(model, arch)
    if message:
        raise DensifyError(message)
    slots = list(model_slots(model))
    weights: dict[str, torch.Tensor] = {}
    maps, used = [], set()
    with torch.no_grad():
        for path, module, target in slots:
            if module is not None:
                used.update(id(p) for p in module.parameters())
            if not is_dense_slot(module, target) and module is not None:
                maps.append((path, type(module).__name__))
            if target == "embedding":
                weights[f"{path}.weight"] = _table(path, module)
            elif target == "output":
                weights[f"{path}.weight"] = _output(module)
            elif target == "qkv":
                prefix = path[: -len(".qkv_proj")]
                for name, (w, b) in zip(("q_proj", "k_proj", "v_proj"), _fused_qkv(path, module)):
                    weights[f"{prefix}.{name}.weight"], weights[f"{prefix}.{name}.bias"] = w, b
            elif type(module) is nn.Identity:  # (an attention without output map: y = x)
                dim = model.get_submodule(path.rpartition(".")[0]).embed_dim
                weights[f"{path}.weight"] = torch.eye(dim, dtype=torch.float64)
                weights[f"{path}.bias"] = torch.zeros(dim, dtype=torch.float64)
            else:
                w, b = _affine(path, module)
                weights[f"{path}.weight"], weights[f"{path}.bias"] = w, b
    tie_all = model.encoder.embed_tokens is model.decoder.embed_tokens
    if tie_all:
        weights["decoder.embed_tokens.weight"] = weights["encoder.embed_tokens.weight"]
    tie_out = _tie_output(weights, task.target_dictionary.pad(), tie_all)
    args = _dense_args(model_args, tie_all, tie_out)
    src, tgt = task.source_dictionary, task.target_dictionary
    with torch.random.fork_rng():  # (the build's random init would move the caller's RNG)
        try:
            dense = build_model_without_data(args, src, tgt)
        except (ValueError, RuntimeError) as exc:
            from lightcompress.errors import one_line

            raise DensifyError(f"cannot build the dense Transformer: {one_line(exc)}") from None
    state = dense.state_dict()
    student = model.state_dict()
    by_name = {n: p for n, p in model.named_parameters(remove_duplicate=False)}
    by_name.update(dict(model.named_buffers(remove_duplicate=False)))
    new = {}
    for key, value in state.items():
        if key in weights:
            src_value = weights[key]
        elif key in student and student[key].shape == value.shape:
            src_value = student[key]
            if key in by_name:
                used.add(id(by_name[key]))
        else:
            raise DensifyError(
                f"the dense Transformer's {key} has no counterpart in the student ({arch}): it "
                "cannot be multiplied out"
            )
        if src_value.shape != value.shape:
            raise DensifyError(
                f"{key}: the student's multiplied-out weight is {tuple(src_value.shape)}, the "
                f"dense Transformer's {tuple(value.shape)}"
            )
        new[key] = src_value.detach().to(value.dtype).clone()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in used:
            raise DensifyError(
                f"the student's {name} has no place in the dense Transformer (a part that "
                "computes outside the maps it has): it cannot be multiplied out"
            )
    dense.load_state_dict(new, strict=True)
    dense.eval()
    result = Densified(dense, args, maps, count_unique_params(model), count_unique_params(dense))
    if check:
        result.max_logprob_difference = max_logprob_difference(model, dense, task)
        if not result.max_logprob_difference <= TOLERANCE:
            raise DensifyError(
                "the multiplied-out Transformer computes another model: its log-probabilities "
                f"of probe translations differ from the student's by up to "
                f"{result.max_logprob_difference:.3g} (allowed {TOLERANCE:g})"
            )
        sources = [s for s, _ in probe_pairs(task)]
        ours = greedy(model, task, sources)
        theirs = [h for h, _ in greedy(dense, task, sources)]
        try:
            result.translations = greedy_mismatch(
                ours, theirs, task.target_dictionary.eos(), "the multiplied-out Transformer"
            )
        except ProbeMismatch as exc:
            raise DensifyError(str(exc)) from None
    return result


# --------------------------------------------------------------------------------------------
# a checkpoint of the dense model, and the command
# --------------------------------------------------------------------------------------------


def densify_checkpoint(path_in: str, data: str, path_out: str, force: bool = False) -> Densified:
    """Write the student checkpoint ``path_in`` (dictionaries in ``data``) multiplied out as
    a fairseq checkpoint of the dense Transformer at ``path_out`` (atomically): ``arch
    transformer`` (fairseq's own model class), the student's task configuration, no optimizer
    state: ``fairseq-generate`` and ``scripts/measure_speed.sh`` load it as any fairseq
    Transformer. Proven before it is written (:func:`densify_model`). Raises :class:`DensifyError` (or the checkpoint's
    :class:`~lightcompress.errors.CheckpointError`) with one line."""
    import lightcompress.plugin  # noqa: F401  (plugin architectures; fairseq checkpoints load)
    from lightcompress.checkpoint import load_checkpoint, read_checkpoint
    from lightcompress.io import atomic_write

    if os.path.exists(path_out) and not force:
        raise DensifyError(f"{path_out} exists (pass --force to replace it)")
    if os.path.isdir(path_out):
        raise DensifyError(f"{path_out} is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path_out))
    if not os.path.isdir(parent):
        raise DensifyError(f"{path_out}: directory {parent} does not exist")
    if os.path.exists(path_out) and os.path.samefile(path_in, path_out):
        raise DensifyError("-o is the student checkpoint itself; refusing to overwrite it")
    if not data or not os.path.isdir(data):
        raise DensifyError(f"--data is not a directory: {data}")
    model, task, model_args = load_checkpoint(path_in, data)
    try:
        dense = densify_model(model, model_args, task)
    except DensifyError as exc:
        raise DensifyError(f"{path_in}: {exc}") from None
    state = read_checkpoint(path_in)
    out = {k: v for k, v in state.items() if k not in ("model", "last_optimizer_state")}
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        cfg = dict(cfg)
        cfg["model"] = dense.args
        out["cfg"], out["args"] = cfg, None
    else:
        out["args"] = dense.args
    out["model"] = dense.model.state_dict()
    out["last_optimizer_state"] = None
    hist = (state.get("optimizer_history") or [{}])[-1]
    out["optimizer_history"] = [
        {
            "criterion_name": hist.get("criterion_name", "LabelSmoothedCrossEntropyCriterion"),
            "optimizer_name": hist.get("optimizer_name", "FairseqAdam"),
            "lr_scheduler_state": {"best": None},
            "num_updates": hist.get("num_updates", 0),
        }
    ]
    extra = dict(state.get("extra_state") or {})
    extra["densified_from"] = os.path.abspath(path_in)
    out["extra_state"] = extra
    try:
        with atomic_write(path_out, "wb") as f:
            torch.save(out, f)
    except OSError as exc:
        raise DensifyError(f"cannot write {path_out}: {exc.strerror or exc}") from None
    return dense


PROG = "lightcompress-densify"


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Multiply out a compressed student (LightFormer, Smartformer, Hypoformer "
        "without Admin) into the fairseq checkpoint of the dense Transformer it computes "
        "(arch transformer; larger than the student by design), proven against the student "
        "on probe translations before it is written.",
    )
    p.add_argument("--path", required=True, help="the student's fairseq checkpoint")
    p.add_argument("--data", required=True, help="its data-bin directory (dictionaries)")
    p.add_argument("-o", "--output", required=True, help="the dense checkpoint to write (.pt)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lightcompress.deploy.densify``: the exit status (errors as one line, 2)."""
    return cli.run(_main, argv, PROG)


def _main(argv: Sequence[str] | None) -> int:
    args = _arg_parser().parse_args(argv)
    dense = densify_checkpoint(args.path, args.data, args.output, args.force)
    size = os.path.getsize(args.output)
    t = dense.translations
    ties = f", {t['near_ties']} parting at a near tie" if t["near_ties"] else ""
    print(
        f"wrote {args.output} ({size / 1e6:.2f} MB): {dense.summary()}; checked against the "
        f"student: largest log-probability difference {dense.max_logprob_difference:.2g} per "
        f"token, {t['equal']} of {t['sentences']} greedy probe translations equal{ties}"
    )
    return 0


cli_main = cli.entry_point(main, quiet=True)

if __name__ == "__main__":
    cli_main()
