"""The compression spec: one grammar to build compressed models and to convert checkpoints.

Grammar
-------
A spec is a list of rules separated by ``;`` or newlines (``#`` starts a comment)::

    rule     := patterns "=" kind [ "(" [ param ("," param)* ] ")" ]
    patterns := pattern ("," pattern)*      # fnmatch patterns on named_modules() names
    param    := name "=" value              # int, float, true/false, or a list "8x8x8"

Example::

    encoder.layers.*.fc1, encoder.layers.*.fc2 = lowrank(rank=80);
    *.self_attn.[qkv]_proj = lowrank(ratio=2);
    decoder.output_projection = dense;
    embed_tokens = lowrank_embedding(rank=135)

Patterns use :func:`fnmatch.fnmatchcase` (``*`` also matches dots). **The first matching rule
wins**: a module claimed by an earlier rule is not considered by later ones, so ``dense`` (a
no-op) excludes modules from a later catch-all rule.

Kinds (target type; parameters, ``|`` = exactly one of):

================== ========= ==============================================================
kind               replaces  parameters
================== ========= ==============================================================
lowrank            Linear    rank | ratio | energy
tt                 Linear    ranks; optional in_shape, out_shape, num_cores (default 3)
htt                Linear    alpha, ranks; optional in_shape, out_shape, num_cores
hmf                Linear    alpha, rank | ratio | energy
cp                 Linear    rank, heads
lowrank_embedding  Embedding rank | ratio | energy
htt_embedding      Embedding alpha, ranks; optional vocab_shape, dim_shape, num_cores
dense              anything  (none; keeps the module)
================== ========= ==============================================================

``energy`` needs trained weights: it is only valid with ``mode="convert"``.
``ranks`` is an int (all bonds) or a list ``16x16``. ``out_shape`` of ``htt`` covers the
factorized ``out - round(alpha out)`` columns; ``dim_shape`` of ``htt_embedding`` likewise.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from torch import nn

from lightcompress.modules.cp import CPLinear
from lightcompress.modules.embeddings import HTTEmbedding, LowRankEmbedding
from lightcompress.modules.hybrid import HybridLinear, dense_columns
from lightcompress.modules.lowrank import LowRankLinear, resolve_rank
from lightcompress.modules.tensor_train import TTLinear, check_tt_shapes, factorize_dim

__all__ = [
    "KINDS",
    "CompressionReport",
    "CompressionSpec",
    "ReplacementRecord",
    "Rule",
    "SpecError",
    "count_params",
    "parse_value",
]


class SpecError(ValueError):
    """An invalid compression spec; the message names the rule text and the module."""


@dataclass(frozen=True)
class _Kind:
    target: str  # "linear", "embedding" or "any"
    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()

    @property
    def allowed(self) -> set[str]:
        return set(self.required) | set(self.one_of) | set(self.optional)


_RANK = ("rank", "ratio", "energy")
_TT_OPT = ("in_shape", "out_shape", "num_cores")
KINDS: dict[str, _Kind] = {
    "lowrank": _Kind("linear", one_of=_RANK),
    "tt": _Kind("linear", required=("ranks",), optional=_TT_OPT),
    "htt": _Kind("linear", required=("alpha", "ranks"), optional=_TT_OPT),
    "hmf": _Kind("linear", required=("alpha",), one_of=_RANK),
    "cp": _Kind("linear", required=("rank", "heads")),
    "lowrank_embedding": _Kind("embedding", one_of=_RANK),
    "htt_embedding": _Kind(
        "embedding",
        required=("alpha", "ranks"),
        optional=("vocab_shape", "dim_shape", "num_cores"),
    ),
    "dense": _Kind("any"),
}
"""Every kind with its target module type and parameter names."""

_TARGET_TYPES = {"linear": nn.Linear, "embedding": nn.Embedding}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int_list(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_int(x) for x in v)


# name -> (check, description)
_PARAM_CHECKS = {
    "rank": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "ratio": (lambda v: _is_num(v) and v > 0, "a number > 0"),
    "energy": (lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]"),
    "alpha": (lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "heads": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "num_cores": (lambda v: _is_int(v) and v >= 2, "an integer >= 2"),
    "ranks": (
        lambda v: (_is_int(v) and v >= 1) or (_is_int_list(v) and min(v) >= 1),
        "an integer >= 1 or a list like 16x16",
    ),
}
for _shape in ("in_shape", "out_shape", "vocab_shape", "dim_shape"):
    _PARAM_CHECKS[_shape] = (
        lambda v: _is_int_list(v) and len(v) >= 2 and min(v) >= 1,
        "a list of >= 2 positive integers like 8x8x8",
    )

_INT_RE = re.compile(r"^[+-]?\d+$")
_LIST_RE = re.compile(r"^\d+(?:x\d+)+$")
_RHS_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?$", re.DOTALL)


def parse_value(text: str):
    """Parse a spec value: ``80`` -> int, ``0.5`` -> float, ``8x8x8`` -> list, ``true``."""
    s = text.strip()
    if _INT_RE.match(s):
        return int(s)
    if _LIST_RE.match(s):
        return [int(x) for x in s.split("x")]
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    try:
        return float(s)
    except ValueError:
        return s


def _format_value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "x".join(str(x) for x in v)
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


@dataclass(frozen=True)
class Rule:
    """One ``patterns = kind(params)`` rule.

    Attributes
    ----------
    patterns : tuple of str
        fnmatch patterns on module names.
    kind : str
        One of :data:`KINDS`.
    params : dict
        Keyword parameters of the kind.
    text : str
        The rule as written (used in error messages).
    """

    patterns: tuple[str, ...]
    kind: str
    params: dict = field(default_factory=dict)
    text: str = ""

    def __post_init__(self):
        if not self.text:
            object.__setattr__(self, "text", self.to_text())
        self._validate()

    def to_text(self) -> str:
        """Canonical text of the rule."""
        args = ",".join(f"{k}={_format_value(v)}" for k, v in self.params.items())
        return f"{','.join(self.patterns)}={self.kind}" + (f"({args})" if args else "")

    def _validate(self) -> None:
        where = f"in rule {self.text!r}"
        if not self.patterns or any(not p for p in self.patterns):
            raise SpecError(f"empty module pattern {where}")
        if self.kind not in KINDS:
            raise SpecError(f"unknown kind {self.kind!r} {where}; known kinds: {sorted(KINDS)}")
        kind = KINDS[self.kind]
        unknown = sorted(set(self.params) - kind.allowed)
        if unknown:
            raise SpecError(
                f"unknown parameter(s) {unknown} for kind {self.kind!r} {where}; allowed: "
                f"{sorted(kind.allowed) or 'none'}"
            )
        missing = [p for p in kind.required if p not in self.params]
        if missing:
            raise SpecError(f"missing parameter(s) {missing} for kind {self.kind!r} {where}")
        if kind.one_of:
            given = [p for p in kind.one_of if p in self.params]
            if len(given) != 1:
                raise SpecError(
                    f"kind {self.kind!r} needs exactly one of {list(kind.one_of)} {where}, "
                    f"got {given or 'none'}"
                )
        for name, value in self.params.items():
            check, desc = _PARAM_CHECKS[name]
            if not check(value):
                raise SpecError(f"parameter {name}={value!r} must be {desc} {where}")


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside parentheses and brackets."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _parse_rule(text: str) -> Rule:
    raw = text.strip()
    if "=" not in raw:
        raise SpecError(f"rule {raw!r} has no '=': write 'pattern=kind(params)'")
    lhs, rhs = raw.split("=", 1)
    patterns = tuple(p.strip() for p in lhs.split(","))
    m = _RHS_RE.match(rhs.strip())
    if not m:
        raise SpecError(f"cannot parse {rhs.strip()!r} as 'kind(params)' in rule {raw!r}")
    kind, args = m.group(1), (m.group(2) or "").strip()
    params: dict = {}
    if args:
        for item in _split_top(args, ","):
            if "=" not in item:
                raise SpecError(f"parameter {item.strip()!r} is not 'name=value' in rule {raw!r}")
            k, v = (s.strip() for s in item.split("=", 1))
            if k in params:
                raise SpecError(f"parameter {k!r} given twice in rule {raw!r}")
            params[k] = parse_value(v)
    return Rule(patterns, kind, params, raw)


@dataclass
class ReplacementRecord:
    """What the spec did (or would do) to one module.

    ``shape`` is ``(out, in)`` for a Linear and ``(V, d)`` for an Embedding; ``rank`` is an
    int (low-rank, CP), a list (TT ranks) or None; ``params_after`` is None when it cannot be
    known before converting (``energy``).
    """

    name: str
    kind: str
    shape: tuple[int, int]
    rank: int | list[int] | None
    kept_energy: float | None
    params_before: int
    params_after: int | None
    rule: str


class CompressionReport(list):
    """A list of :class:`ReplacementRecord` with totals and a printable table."""

    @property
    def params_before(self) -> int:
        return sum(r.params_before for r in self)

    @property
    def params_after(self) -> int | None:
        if any(r.params_after is None for r in self):
            return None
        return sum(r.params_after for r in self)

    def format(self) -> str:
        """A plain-text table, one line per module."""
        lines = [
            (
                f"{'module':40s} {'kind':18s} {'shape':>12s} {'rank':>10s} {'energy':>7s} "
                f"{'before':>10s} {'after':>10s}"
            )
        ]
        for r in self:
            rank = "x".join(map(str, r.rank)) if isinstance(r.rank, list) else str(r.rank or "-")
            energy = f"{r.kept_energy:.4f}" if r.kept_energy is not None else "-"
            lines.append(
                f"{r.name:40s} {r.kind:18s} {'x'.join(map(str, r.shape)):>12s} {rank:>10s} "
                f"{energy:>7s} {r.params_before:>10d} {r.params_after!s:>10s}"
            )
        return "\n".join(lines)


def _tt_shapes(in_f, out_f, params) -> tuple[list[int], list[int]]:
    nc = params.get("num_cores", 3)
    in_shape = params.get("in_shape") or factorize_dim(in_f, nc)
    out_shape = params.get("out_shape") or factorize_dim(out_f, len(in_shape))
    return list(in_shape), list(out_shape)


def _layer_kwargs(kind: str, in_f: int, out_f: int, params: Mapping, bias: bool) -> dict:
    """Constructor keyword arguments of the kind's class for a from-scratch layer."""
    p = dict(params)
    if "energy" in p:
        raise ValueError(
            f"energy={p['energy']} needs trained weights: use it with mode='convert' only"
        )
    if kind == "lowrank":
        r = resolve_rank(out_f, in_f, rank=p.get("rank"), ratio=p.get("ratio"))
        return {"in_features": in_f, "out_features": out_f, "rank": r, "bias": bias}
    if kind == "tt":
        in_shape, out_shape = _tt_shapes(in_f, out_f, p)
        check_tt_shapes(in_shape, out_shape, p["ranks"], in_f, out_f)
        return {
            "in_shape": in_shape,
            "out_shape": out_shape,
            "ranks": p["ranks"],
            "bias": bias,
        }
    if kind == "htt":
        return {
            "in_features": in_f,
            "out_features": out_f,
            "alpha": p["alpha"],
            "kind": "tt",
            "ranks": p["ranks"],
            "in_shape": p.get("in_shape"),
            "out_shape": p.get("out_shape"),
            "num_cores": p.get("num_cores", 3),
            "bias": bias,
        }
    if kind == "hmf":
        nf = out_f - dense_columns(p["alpha"], out_f)
        r = resolve_rank(nf, in_f, rank=p.get("rank"), ratio=p.get("ratio")) if nf else None
        return {
            "in_features": in_f,
            "out_features": out_f,
            "alpha": p["alpha"],
            "kind": "lowrank",
            "rank": r,
            "bias": bias,
        }
    if kind == "cp":
        return {
            "in_features": in_f,
            "out_features": out_f,
            "rank": p["rank"],
            "heads": p["heads"],
            "bias": bias,
        }
    if kind == "lowrank_embedding":
        r = resolve_rank(in_f, out_f, rank=p.get("rank"), ratio=p.get("ratio"))
        return {"num_embeddings": in_f, "embedding_dim": out_f, "rank": r}
    if kind == "htt_embedding":
        return {
            "num_embeddings": in_f,
            "embedding_dim": out_f,
            "alpha": p["alpha"],
            "ranks": p["ranks"],
            "vocab_shape": p.get("vocab_shape"),
            "dim_shape": p.get("dim_shape"),
            "num_cores": p.get("num_cores", 3),
        }
    raise ValueError(f"unknown kind {kind!r}")


_CLASSES = {
    "lowrank": LowRankLinear,
    "tt": TTLinear,
    "htt": HybridLinear,
    "hmf": HybridLinear,
    "cp": CPLinear,
    "lowrank_embedding": LowRankEmbedding,
    "htt_embedding": HTTEmbedding,
}


def count_params(
    kind: str, in_features: int, out_features: int, bias: bool = True, **params
) -> int:
    """Exact parameter count of a layer of ``kind`` replacing a dense one.

    Parameters
    ----------
    kind : str
        A key of :data:`KINDS`.
    in_features, out_features : int
        The dense layer's shape; for embedding kinds pass ``num_embeddings, embedding_dim``.
    bias : bool
        Whether the (linear) layer has a bias; ignored for embeddings.
    **params
        The kind's parameters as in a spec rule (``energy`` is not countable statically).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Invalid parameters for this shape (SpecError for an unknown kind or parameter).
    """
    Rule(("*",), kind, dict(params))  # kind / parameter-name / range validation
    if kind == "dense":  # pass bias=False for an embedding table
        return in_features * out_features + (out_features if bias else 0)
    kwargs = _layer_kwargs(kind, in_features, out_features, params, bias)
    return _CLASSES[kind].num_params(**kwargs)


def _shape_of(module: nn.Module) -> tuple[int, int]:
    if isinstance(module, nn.Embedding):
        return (module.num_embeddings, module.embedding_dim)
    if isinstance(module, nn.Linear):
        return (module.out_features, module.in_features)
    w = getattr(module, "weight", None)
    return tuple(w.shape[:2]) if w is not None and w.dim() >= 2 else (0, 0)


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _describe(name: str, module: nn.Module) -> str:
    if isinstance(module, nn.Linear):
        return f"module {name!r} (nn.Linear {module.in_features}->{module.out_features})"
    if isinstance(module, nn.Embedding):
        return f"module {name!r} (nn.Embedding {module.num_embeddings}x{module.embedding_dim})"
    return f"module {name!r} ({type(module).__name__})"


class CompressionSpec:
    """An ordered list of :class:`Rule` objects; see the module docstring for the grammar.

    Build with :meth:`parse` (text) or :meth:`from_obj` (text, a list of rules/dicts, or a
    ``{pattern: "kind(params)" | {"kind": ..., **params}}`` mapping).
    """

    def __init__(self, rules: Iterable[Rule]):
        self.rules = list(rules)

    def __repr__(self) -> str:
        return f"CompressionSpec.parse({self.to_text()!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, CompressionSpec) and [
            (r.patterns, r.kind, r.params) for r in self.rules
        ] == [(r.patterns, r.kind, r.params) for r in other.rules]

    def to_text(self) -> str:
        """Canonical text (``parse(spec.to_text()) == spec``)."""
        return "; ".join(r.to_text() for r in self.rules)

    @classmethod
    def parse(cls, text: str) -> CompressionSpec:
        """Parse spec text (rules separated by ``;`` or newlines, ``#`` comments)."""
        lines = [line.split("#", 1)[0] for line in text.splitlines()]
        chunks = [c for line in lines for c in _split_top(line, ";")]
        return cls(_parse_rule(c) for c in chunks if c.strip())

    @classmethod
    def from_obj(cls, obj) -> CompressionSpec:
        """Build from text, a CompressionSpec, a list, or a mapping (see class docstring).

        List items may be rule text, ``(patterns, "kind(params)")`` pairs, or dicts with
        ``"pattern"``/``"patterns"``, ``"kind"`` and either ``"params"`` or flat parameters.
        """
        if isinstance(obj, CompressionSpec):
            return obj
        if isinstance(obj, str):
            return cls.parse(obj)
        if isinstance(obj, Mapping):
            items = []
            for pat, val in obj.items():
                if isinstance(val, Mapping):
                    items.append({"patterns": pat, **val})
                else:
                    items.append((pat, val))
            return cls.from_obj(items)
        rules = []
        for item in obj:
            if isinstance(item, Rule):
                rules.append(item)
            elif isinstance(item, str):
                rules.append(_parse_rule(item))
            elif isinstance(item, tuple) and len(item) == 2:
                pats = item[0] if isinstance(item[0], str) else ",".join(item[0])
                rules.append(_parse_rule(f"{pats}={item[1]}"))
            elif isinstance(item, Mapping):
                d = dict(item)
                pats = d.pop("patterns", None) or d.pop("pattern", None)
                if pats is None or "kind" not in d:
                    raise SpecError(f"rule {item!r} needs 'pattern(s)' and 'kind'")
                if isinstance(pats, str):
                    pats = [p.strip() for p in pats.split(",")]
                kind = d.pop("kind")
                params = dict(d.pop("params", {}))
                params.update(d)
                params = {
                    k: (parse_value(v) if isinstance(v, str) else v) for k, v in params.items()
                }
                rules.append(Rule(tuple(pats), kind, params))
            else:
                raise SpecError(f"cannot read a spec rule from {item!r}")
        return cls(rules)

    # ------------------------------------------------------------------ matching

    def match(self, model: nn.Module) -> list[tuple[str, nn.Module, Rule]]:
        """Modules claimed by each rule (first matching rule wins), with structural checks.

        Raises
        ------
        SpecError
            A pattern that matches no module (or only modules claimed by earlier rules), or a
            module of the wrong type for the rule's kind.
        """
        modules = [(n, m) for n, m in model.named_modules() if n]
        claimed: dict[str, Rule] = {}
        for rule in self.rules:
            for pat in rule.patterns:
                hits = [n for n, _ in modules if fnmatch.fnmatchcase(n, pat)]
                if not hits:
                    raise SpecError(f"pattern {pat!r} in rule {rule.text!r} matches no module")
                new = [n for n in hits if n not in claimed]
                if not new:
                    raise SpecError(
                        f"pattern {pat!r} in rule {rule.text!r} matches only modules already "
                        f"claimed by earlier rules (first match wins), e.g. {hits[0]!r}"
                    )
                for n in new:
                    claimed[n] = rule
        plan = []
        for name, module in modules:
            rule = claimed.get(name)
            if rule is None:
                continue
            target = KINDS[rule.kind].target
            if target != "any" and not isinstance(module, _TARGET_TYPES[target]):
                raise SpecError(
                    f"rule {rule.text!r} matches {_describe(name, module)}, but kind "
                    f"{rule.kind!r} replaces an nn.{_TARGET_TYPES[target].__name__}; narrow "
                    "the pattern"
                )
            plan.append((name, module, rule))
        return plan

    def _predict(self, name: str, module: nn.Module, rule: Rule, mode: str) -> ReplacementRecord:
        shape = _shape_of(module)
        before = _numel(module)
        rank, after = None, before
        if rule.kind != "dense":
            if isinstance(module, nn.Embedding):
                in_f, out_f, bias = module.num_embeddings, module.embedding_dim, False
            else:
                in_f, out_f, bias = (
                    module.in_features,
                    module.out_features,
                    module.bias is not None,
                )
            try:
                if "energy" in rule.params:
                    if mode != "convert":
                        raise ValueError(
                            f"energy={rule.params['energy']} needs trained weights: use "
                            "mode='convert'"
                        )
                    after = None
                else:
                    kwargs = _layer_kwargs(rule.kind, in_f, out_f, rule.params, bias)
                    after = _CLASSES[rule.kind].num_params(**kwargs)
                    rank = kwargs.get("rank", kwargs.get("ranks"))
            except ValueError as exc:
                raise SpecError(f"rule {rule.text!r} on {_describe(name, module)}: {exc}") from None
        return ReplacementRecord(name, rule.kind, shape, rank, None, before, after, rule.text)

    def validate(self, model: nn.Module, mode: str = "init") -> CompressionReport:
        """Check the spec against ``model`` without modifying it.

        Returns
        -------
        CompressionReport
            Predicted records (``params_after`` None where ``energy`` decides the rank).

        Raises
        ------
        SpecError
            On the first problem, naming the rule text and the module.
        """
        if mode not in ("init", "convert"):
            raise SpecError(f"mode must be 'init' or 'convert', got {mode!r}")
        return CompressionReport(self._predict(n, m, r, mode) for n, m, r in self.match(model))

    def apply(self, model: nn.Module, mode: str = "init") -> CompressionReport:
        """Replace matched modules in place (``setattr`` on the parent).

        Parameters
        ----------
        model : nn.Module
        mode : {"init", "convert"}
            ``"init"``: new layers from scratch with the matched layer's shape, device and
            dtype. ``"convert"``: ``from_linear`` / ``from_embedding`` on the trained weights.

        Returns
        -------
        CompressionReport
            One record per matched module (rank used, kept energy, params before/after).

        Notes
        -----
        The whole spec is validated before anything is replaced. Shared parameters (see
        :mod:`~lightcompress.modules.sharing`) are not preserved by replacement: apply the
        spec first, then tie layers.
        """
        self.validate(model, mode)
        report = CompressionReport()
        for name, module, rule in self.match(model):
            rec = self._predict(name, module, rule, mode)
            if rule.kind != "dense":
                try:
                    new = self._build(module, rule, mode)
                except ValueError as exc:
                    raise SpecError(
                        f"rule {rule.text!r} on {_describe(name, module)}: {exc}"
                    ) from None
                parent_name, _, child = name.rpartition(".")
                parent = model.get_submodule(parent_name) if parent_name else model
                setattr(parent, child, new)
                rec.rank = getattr(new, "rank", None)
                rec.kept_energy = getattr(new, "kept_energy", None)
                rec.params_after = _numel(new)
            report.append(rec)
        return report

    @staticmethod
    def _build(module: nn.Module, rule: Rule, mode: str) -> nn.Module:
        p = dict(rule.params)
        kind = rule.kind
        if mode == "convert":
            if kind == "lowrank":
                return LowRankLinear.from_linear(module, **p)
            if kind in ("tt", "htt"):
                nc = p.pop("num_cores", 3)
                in_shape, out_shape = p.pop("in_shape", None), p.pop("out_shape", None)
                if kind == "tt":
                    return TTLinear.from_linear(module, in_shape, out_shape, p["ranks"], nc)
                return HybridLinear.from_linear(
                    module,
                    p["alpha"],
                    "tt",
                    ranks=p["ranks"],
                    in_shape=in_shape,
                    out_shape=out_shape,
                    num_cores=nc,
                )
            if kind == "hmf":
                alpha = p.pop("alpha")
                return HybridLinear.from_linear(module, alpha, "lowrank", **p)
            if kind == "cp":
                return CPLinear.from_linear(module, p["rank"], p["heads"])
            if kind == "lowrank_embedding":
                return LowRankEmbedding.from_embedding(module, **p)
            if kind == "htt_embedding":
                return HTTEmbedding.from_embedding(module, **p)
            raise ValueError(f"unknown kind {kind!r}")  # pragma: no cover
        if isinstance(module, nn.Embedding):
            kwargs = _layer_kwargs(kind, module.num_embeddings, module.embedding_dim, p, False)
            new = _CLASSES[kind](padding_idx=module.padding_idx, **kwargs)
        else:
            kwargs = _layer_kwargs(
                kind,
                module.in_features,
                module.out_features,
                p,
                module.bias is not None,
            )
            new = _CLASSES[kind](**kwargs)
        w = module.weight
        return new.to(device=w.device, dtype=w.dtype)
