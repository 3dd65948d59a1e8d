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

The grammar and its :class:`Rule` s are in :mod:`lightcompress.modules.spec_grammar`, the
records and reports in :mod:`lightcompress.modules.spec_report`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

from torch import nn

from lightcompress.errors import SpecError
from lightcompress.modules.registry import (
    KINDS,
    Shape,
    target_of,
)
from lightcompress.modules.spec_grammar import (
    Rule,
    parse_rule,
    parse_value,
    split_top,
)
from lightcompress.modules.spec_report import (
    CompressionReport,
    ReplacementRecord,
    describe_module,
    module_numel,
    module_shape,
)

__all__ = [
    "KINDS",
    "CompressionSpec",
    "SpecError",
    "SpecPlan",
]


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
        chunks = [c for line in lines for c in split_top(line, ";")]
        return cls(parse_rule(c) for c in chunks if c.strip())

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
                rules.append(parse_rule(item))
            elif isinstance(item, tuple) and len(item) == 2:
                pats = item[0] if isinstance(item[0], str) else ",".join(item[0])
                rules.append(parse_rule(f"{pats}={item[1]}"))
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
                        f"rule {rule.text!r} matches {describe_module(name, module)}, but kind "
                        f"{rule.kind!r} replaces an nn.Linear or an nn.Embedding; narrow the "
                        "pattern"
                    )
                rule.variant(target, describe_module(name, module))
            plan.append((name, module, rule))
        return plan

    def _predict(self, name: str, module: nn.Module, rule: Rule, mode: str) -> ReplacementRecord:
        shape = module_shape(module)
        before = module_numel(module)
        rank, after = None, before
        target = target_of(module)
        if rule.canonical_kind != "dense" and target is not None:
            variant = rule.variant(target, describe_module(name, module))
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
                raise SpecError(
                    f"rule {rule.text!r} on {describe_module(name, module)}: {exc}"
                ) from None
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
                        f"rule {rule.text!r} on {describe_module(name, module)}: {exc}"
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
    rec.params_after = module_numel(new)


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
            path,
            rule.canonical_kind,
            (shape.out_features, shape.in_features)
            if target != "embedding"
            else (shape.in_features, shape.out_features),
            None,
            None,
            before,
            None,
            rule.text,
        )
        _fill_record(rec, new)
        self.report.append(rec)
        return new

    def linear(self, path: str, in_features: int, out_features: int, bias: bool = True):
        """The layer for an ``nn.Linear(in, out)`` slot at ``path``, or None (dense)."""
        return self._layer(
            path,
            "linear",
            Shape(in_features, out_features, bias),
            f"nn.Linear {in_features}->{out_features}",
        )

    def embedding(self, path: str, num_embeddings: int, dim: int, padding_idx=None):
        """The table for an ``nn.Embedding(V, d)`` slot at ``path``, or None (dense)."""
        return self._layer(
            path,
            "embedding",
            Shape(num_embeddings, dim, False, padding_idx),
            f"nn.Embedding {num_embeddings}x{dim}",
        )

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
