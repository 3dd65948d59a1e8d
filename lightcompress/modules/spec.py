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

Kinds come from the kind registry (:mod:`lightcompress.modules.registry`); one name serves
every slot it can fill (``lowrank`` on an ``nn.Linear`` or an ``nn.Embedding``):

========== ============================ =========================================================
kind       fills                        parameters (``|`` = exactly one of)
========== ============================ =========================================================
lowrank    Linear, Embedding, fused QKV rank | ratio | energy
tt         Linear, Embedding, fused QKV ranks; optional in_shape, out_shape (vocab_shape,
                                        dim_shape for an embedding), num_cores (default 3)
htt        Linear, Embedding, fused QKV alpha, ranks; optional shapes as tt, num_cores
hmf        Linear, fused QKV            alpha, rank | ratio | energy
cp         Linear                       rank, heads
identity   square Linear                (none; y = x, no parameters)
dense      anything                     (none; keeps the module)
========== ============================ =========================================================

``lowrank_embedding`` and ``htt_embedding`` are accepted as aliases of ``lowrank`` / ``htt``
on an embedding. ``energy`` needs trained weights: it is only valid with ``mode="convert"``.
``ranks`` is an int (all bonds; ``0`` = the maximal, exact TT ranks) or a list ``16x16``.
``out_shape`` of ``htt`` covers the factorized ``out - round(alpha out)`` columns;
``dim_shape`` of an ``htt`` embedding likewise.

Two ways to use a spec, with the same rules and the same layer classes:

- :meth:`CompressionSpec.apply` replaces modules of a built model by name (any PyTorch model);
- :class:`SpecPlan` answers a model's build hooks path by path (``plan.linear("encoder.
  layers.3.fc1", 512, 1024)``), so that a compressed fairseq model is built compressed;
  :meth:`SpecPlan.finish` then reports the patterns that matched nothing.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from torch import nn

from lightcompress.errors import SpecError
from lightcompress.modules.registry import (
    ALIASES,
    KINDS,
    Shape,
    canonical_kind,
    get_variant,
    schema_names,
    target_of,
)

__all__ = [
    "KINDS",
    "CompressionReport",
    "CompressionSpec",
    "ReplacementRecord",
    "Rule",
    "SpecError",
    "SpecPlan",
    "count_params",
    "parse_value",
]


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

    @property
    def canonical_kind(self) -> str:
        """The registry name of the kind (aliases resolved)."""
        return canonical_kind(self.kind)

    def variant(self, target: str, where: str = ""):
        """The registry variant of this rule's kind for ``target`` (parameters checked)."""
        where = f"in rule {self.text!r}" + (f" on {where}" if where else "")
        v = get_variant(self.kind, target, where)
        v.check(self.params, where)
        return v

    def _validate(self) -> None:
        where = f"in rule {self.text!r}"
        if not self.patterns or any(not p for p in self.patterns):
            raise SpecError(f"empty module pattern {where}")
        if self.kind not in KINDS and self.kind not in ALIASES:
            raise SpecError(
                f"unknown kind {self.kind!r} {where}; known kinds: {sorted(KINDS)} "
                f"(aliases: {sorted(ALIASES)})"
            )
        allowed = schema_names(self.kind)
        unknown = sorted(set(self.params) - allowed)
        if unknown:
            raise SpecError(
                f"unknown parameter(s) {unknown} for kind {self.kind!r} {where}; allowed: "
                f"{sorted(allowed) or 'none'}"
            )
        from lightcompress.modules.registry import PARAM_CHECKS

        for name, value in self.params.items():
            check, desc = PARAM_CHECKS[name]
            if not check(value):
                raise SpecError(f"parameter {name}={value!r} must be {desc} {where}")
        # required / exactly-one-of: every variant of a kind shares them, except targets the
        # kind cannot fill; check against the first variant that accepts these names
        variants = (
            [KINDS[ALIASES[self.kind][0]].variants[ALIASES[self.kind][1]]]
            if self.kind in ALIASES
            else list(KINDS[self.kind].variants.values())
        )
        fitting = [v for v in variants if set(self.params) <= v.allowed]
        if not fitting:
            raise SpecError(
                f"parameters {sorted(self.params)} of kind {self.kind!r} {where} do not belong "
                f"to one of its forms ({', '.join(sorted(v.target for v in variants))})"
            )
        fitting[0].check(self.params, where)


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


def count_params(
    kind: str,
    in_features: int,
    out_features: int,
    bias: bool = True,
    target: str | None = None,
    **params,
) -> int:
    """Exact parameter count of a layer of ``kind`` replacing a dense one.

    Parameters
    ----------
    kind : str
        A kind of the registry (or an alias, which fixes the target).
    in_features, out_features : int
        The dense layer's shape; for an embedding ``num_embeddings, embedding_dim``; for a
        fused Q/K/V map ``d, 3d``.
    bias : bool
        Whether the (linear) layer has a bias; ignored for embeddings.
    target : {"linear", "embedding", "qkv"}, optional
        The slot (default: ``linear``, or the alias's target).
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
    rule = Rule(("*",), kind, dict(params))  # kind / parameter-name / range validation
    if target is None:
        target = ALIASES[kind][1] if kind in ALIASES else "linear"
    if canonical_kind(kind) == "dense" and target != "qkv":  # pass bias=False for a table
        return in_features * out_features + (out_features if bias and target == "linear" else 0)
    variant = rule.variant(target)
    return variant.num_params(Shape(in_features, out_features, bias), params)


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
            module the rule's kind cannot replace.
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
            if rule.canonical_kind != "dense":
                target = target_of(module)
                if target is None:
                    raise SpecError(
                        f"rule {rule.text!r} matches {_describe(name, module)}, but kind "
                        f"{rule.kind!r} replaces an nn.Linear or an nn.Embedding; narrow the "
                        "pattern"
                    )
                rule.variant(target, _describe(name, module))
            plan.append((name, module, rule))
        return plan

    def _predict(self, name: str, module: nn.Module, rule: Rule, mode: str) -> ReplacementRecord:
        shape = _shape_of(module)
        before = _numel(module)
        rank, after = None, before
        target = target_of(module)
        if rule.canonical_kind != "dense" and target is not None:
            variant = rule.variant(target, _describe(name, module))
            try:
                if "energy" in rule.params:
                    if mode != "convert":
                        raise ValueError(
                            f"energy={rule.params['energy']} needs trained weights: use "
                            "mode='convert'"
                        )
                    after = None
                else:
                    kwargs = variant.kwargs(_slot(module), rule.params)
                    after = variant.num_params(_slot(module), rule.params)
                    rank = kwargs.get("rank", kwargs.get("ranks"))
            except ValueError as exc:
                raise SpecError(f"rule {rule.text!r} on {_describe(name, module)}: {exc}") from None
        return ReplacementRecord(
            name, rule.canonical_kind, shape, rank, None, before, after, rule.text
        )

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
            dtype. ``"convert"``: the kind's weight transfer (SVD, TT-SVD, CP fit) of the
            trained weights.

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
            if rule.canonical_kind != "dense":
                try:
                    new = build_layer(rule, module, mode)
                except ValueError as exc:
                    raise SpecError(
                        f"rule {rule.text!r} on {_describe(name, module)}: {exc}"
                    ) from None
                parent_name, _, child = name.rpartition(".")
                parent = model.get_submodule(parent_name) if parent_name else model
                setattr(parent, child, new)
                _fill_record(rec, new)
            report.append(rec)
        return report


def _slot(module: nn.Module) -> Shape:
    """The :class:`Shape` of a dense Linear / Embedding."""
    if isinstance(module, nn.Embedding):
        return Shape(module.num_embeddings, module.embedding_dim, False, module.padding_idx)
    return Shape(module.in_features, module.out_features, module.bias is not None)


def _fill_record(rec: ReplacementRecord, new: nn.Module) -> None:
    rec.rank = getattr(new, "rank", None)
    rec.kept_energy = getattr(new, "kept_energy", None)
    rec.params_after = _numel(new)


def build_layer(rule: Rule, module: nn.Module, mode: str = "init") -> nn.Module:
    """The layer ``rule`` puts in place of the dense ``module`` (``init``: from scratch on the
    module's device and dtype; ``convert``: fitted to its weights)."""
    variant = rule.variant(target_of(module))
    if mode == "convert":
        return variant.from_dense(module, rule.params)
    new = variant.build(_slot(module), rule.params)
    w = module.weight
    return new.to(device=w.device, dtype=w.dtype)


class SpecPlan:
    """A spec asked path by path while a model is built (the build hooks' side of the spec).

    Each ``linear`` / ``embedding`` / ``qkv`` call names the module path the layer will have
    in the finished model, and gets the layer of the first rule whose pattern matches that
    path, or ``None`` when no rule claims it (the caller then builds its dense default).
    ``mode="convert"`` fits each layer to the dense module ``source(path)`` returns (the
    teacher's, for weight transfer).

    Parameters
    ----------
    spec : CompressionSpec
    mode : {"init", "convert"}
    source : callable, optional
        ``path -> dense module`` (``convert`` mode; for a ``qkv`` path a ``(q, k, v)`` triple).

    Attributes
    ----------
    report : CompressionReport
        One record per layer built by a rule.
    """

    def __init__(self, spec: CompressionSpec, mode: str = "init", source=None):
        if mode not in ("init", "convert"):
            raise SpecError(f"mode must be 'init' or 'convert', got {mode!r}")
        if mode == "convert" and source is None:
            raise SpecError("a convert-mode SpecPlan needs source(path) -> dense module")
        self.spec, self.mode, self.source = spec, mode, source
        self.report = CompressionReport()
        self._hits: dict[tuple[int, str], int] = {
            (i, p): 0 for i, r in enumerate(spec.rules) for p in r.patterns
        }
        self.asked: list[str] = []

    def rule_for(self, path: str) -> Rule | None:
        """The first rule with a pattern matching ``path`` (counted for :meth:`finish`)."""
        self.asked.append(path)
        for i, rule in enumerate(self.spec.rules):
            for pat in rule.patterns:
                if fnmatch.fnmatchcase(path, pat):
                    self._hits[(i, pat)] += 1
                    return rule
        return None

    def rule_peek(self, path: str) -> Rule | None:
        """The rule that would claim ``path`` (nothing is counted)."""
        for rule in self.spec.rules:
            if any(fnmatch.fnmatchcase(path, p) for p in rule.patterns):
                return rule
        return None

    def _layer(self, path, target, shape: Shape, what: str):
        rule = self.rule_for(path)
        if rule is None or rule.canonical_kind == "dense" and target != "qkv":
            return None
        where = f"module {path!r} ({what})"
        variant = rule.variant(target, where)
        try:
            if self.mode == "convert":
                new = variant.from_dense(self.source(path), rule.params)
            else:
                new = variant.build(shape, rule.params)
        except ValueError as exc:
            raise SpecError(f"rule {rule.text!r} on {where}: {exc}") from None
        before = shape.in_features * shape.out_features
        if shape.bias and target != "embedding":
            before += shape.out_features
        rec = ReplacementRecord(
            path, rule.canonical_kind, (shape.out_features, shape.in_features)
            if target != "embedding" else (shape.in_features, shape.out_features),
            None, None, before, None, rule.text,
        )  # fmt: skip
        _fill_record(rec, new)
        self.report.append(rec)
        return new

    def linear(self, path: str, in_features: int, out_features: int, bias: bool = True):
        """The layer for an ``nn.Linear(in, out)`` slot at ``path``, or None (dense)."""
        return self._layer(
            path, "linear", Shape(in_features, out_features, bias),
            f"nn.Linear {in_features}->{out_features}",
        )  # fmt: skip

    def embedding(self, path: str, num_embeddings: int, dim: int, padding_idx=None):
        """The table for an ``nn.Embedding(V, d)`` slot at ``path``, or None (dense)."""
        return self._layer(
            path, "embedding", Shape(num_embeddings, dim, False, padding_idx),
            f"nn.Embedding {num_embeddings}x{dim}",
        )  # fmt: skip

    def qkv(self, path: str, dim: int, bias: bool = True):
        """A :class:`~lightcompress.modules.fused_qkv.FusedQKV` for the fused Q/K/V slot at
        ``path`` (``<attention>.qkv_proj``), or None when no rule names it."""
        return self._layer(path, "qkv", Shape(dim, 3 * dim, bias), f"fused Q/K/V {dim}->{3 * dim}")

    def finish(self) -> CompressionReport:
        """Raise SpecError for a pattern that matched no path asked; return the report."""
        for (i, pat), n in self._hits.items():
            if n:
                continue
            rule = self.spec.rules[i]
            if any(fnmatch.fnmatchcase(p, pat) for p in self.asked):
                raise SpecError(
                    f"pattern {pat!r} in rule {rule.text!r} matches only modules already "
                    "claimed by earlier rules (first match wins)"
                )
            raise SpecError(
                f"pattern {pat!r} in rule {rule.text!r} matches no module (the model has "
                f"e.g. {', '.join(repr(p) for p in self.asked[:3])})"
            )
        return self.report
