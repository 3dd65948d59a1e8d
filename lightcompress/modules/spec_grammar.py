"""The rules of a compression spec (:mod:`lightcompress.modules.spec`): the grammar
``patterns = kind(param=value, ...)``, parsed into validated :class:`Rule` s (kinds and
parameters checked against the kind registry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lightcompress.errors import SpecError
from lightcompress.modules.registry import (
    ALIASES,
    KINDS,
    canonical_kind,
    get_variant,
    schema_names,
)

__all__ = ["Rule", "parse_rule", "parse_value", "split_top"]


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


def split_top(text: str, sep: str) -> list[str]:
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


def parse_rule(text: str) -> Rule:
    """One rule ``pattern[|pattern...]=kind(params)`` (SpecError when malformed)."""
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
        for item in split_top(args, ","):
            if "=" not in item:
                raise SpecError(f"parameter {item.strip()!r} is not 'name=value' in rule {raw!r}")
            k, v = (s.strip() for s in item.split("=", 1))
            if k in params:
                raise SpecError(f"parameter {k!r} given twice in rule {raw!r}")
            params[k] = parse_value(v)
    return Rule(patterns, kind, params, raw)
