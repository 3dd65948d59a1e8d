"""The methods ``lightcompress-compress`` can apply to a dense teacher: each one's student flags
at a rank, its preconditions on the teacher, and the rank search for a parameter target.

Counting is ``lightcompress-params --table`` (the project's count of a built model, run as a
command): the search evaluates a few ranks per call, interpolating (counts grow about linearly
in the rank) and bracketing until the largest rank within the target is known exactly.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from lightcompress.compress.teacher import CompressError, Teacher

__all__ = ["METHODS", "Method", "Target", "count_params", "dawid_sparsity", "search_rank", "tool"]


def tool(name: str) -> list[str]:
    """A console script of this environment (next to the running python, else on PATH)."""
    import os
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), name)
    return [exe if os.path.exists(exe) else name]


@dataclass
class Target:
    """What the user asked for: a ratio or count of total parameters, a rank, an energy, or a
    DA-WID sparsity (exactly one)."""

    ratio: float | None = None
    params: int | None = None
    rank: int | None = None
    energy: float | None = None
    sparsity: float | None = None

    def describe(self) -> str:
        if self.ratio is not None:
            return f"{self.ratio:g}x fewer parameters than the teacher"
        if self.params is not None:
            return f"at most {self.params:,} parameters"
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.energy is not None:
            return f"energy {self.energy:g} per matrix"
        return f"sparsity {self.sparsity:g}"


@dataclass(frozen=True)
class Method:
    """One compression method: its student architecture and what it needs of the teacher."""

    name: str
    arch: str
    rank_name: str  # what the searched rank is, in the method's words
    needs_post_ln: bool = False
    needs_shared: bool = True

    def max_rank(self, teacher: Teacher) -> int:
        s = teacher.settings
        d = min(s["encoder_embed_dim"], s["decoder_embed_dim"])
        if self.name == "hypoformer":
            return max(1, min(d, s["encoder_ffn_embed_dim"], s["decoder_ffn_embed_dim"]) - 1)
        return max(1, d - 1)

    def flags(self, rank: int, embed_rank: int | None, teacher: Teacher) -> list[str]:
        """The method's own student flags at ``rank`` (the shape flags come separately)."""
        if self.name == "lightformer":
            d = teacher.settings["encoder_embed_dim"]
            e = embed_rank if embed_rank is not None else max(1, min(2 * rank, d // 2))
            return ["--lc-encoder-groups", "0", "--lc-decoder-groups", "0",
                    "--lc-rank", str(rank), "--lc-embed-rank", str(e)]  # fmt: skip
        if self.name == "hypoformer":
            # keeping the attention output projections lets the teacher's be transferred
            return ["--hypo-attn-out-proj", "--hypo-ffn-rank", str(rank)]
        if self.name == "smartformer":
            return ["--sm-rank", str(rank), "--sm-attn", "all"]
        raise AssertionError(self.name)

    def check(self, teacher: Teacher) -> None:
        """Refuse a teacher this method cannot take, naming the way out."""
        if self.needs_post_ln and not teacher.post_ln:
            other = "lightformer or smartformer"
            raise CompressError(
                f"the teacher is pre-LN (--encoder/decoder-normalize-before) and {self.name}'s "
                f"transfer needs a post-LN teacher: use --method {other}, or train a post-LN "
                "teacher"
            )
        if self.needs_shared and not teacher.shared:
            raise CompressError(
                f"the teacher does not share its embeddings (--share-all-embeddings) and the "
                f"{self.name} student does: use --method dawid, or train the teacher with "
                "--share-all-embeddings"
            )


METHODS = {
    "lightformer": Method("lightformer", "lightformer", "rank of every attention / FFN map"),
    "hypoformer": Method("hypoformer", "hypoformer", "rank of the FFN maps", needs_post_ln=True),
    "smartformer": Method("smartformer", "smartformer", "CP rank of every Q/K/V map"),
    "dawid": Method("dawid", "dawid", "", needs_post_ln=True, needs_shared=False),
}
SUBFORMER_REFUSAL = (
    "Subformer has no weight transfer from a dense teacher (its sandwich sharing and SAFE "
    "embedding have nothing to inherit): train it from scratch with the recipes in "
    "examples/translation/subformer/, or compress this teacher with --method lightformer, "
    "hypoformer, smartformer or dawid"
)


def _spec(label: str, arch: str, flags: list[str]) -> str:
    """``label=arch:--flag=value:--switch`` (lightcompress-params --table's model spec)."""
    parts, i = [f"{label}={arch}"], 0
    while i < len(flags):
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            parts.append(f"{flags[i]}={flags[i + 1]}")
            i += 2
        else:
            parts.append(flags[i])
            i += 1
    return ":".join(parts)


def count_params(specs: dict[str, tuple[str, list[str]]], vocab: int) -> dict[str, int]:
    """Total parameters of each ``label -> (arch, flags)`` at a joined vocabulary of ``vocab``
    (one ``lightcompress-params --table --json`` call)."""
    table = ",".join(_spec(label, arch, flags) for label, (arch, flags) in specs.items())
    cmd = tool("lightcompress-params") + ["--vocab-size", str(vocab), "--table", table, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        why = lines[-1].split("error: ", 1)[-1] if lines else f"exit {proc.returncode}"
        raise CompressError(f"the student cannot be built from this teacher's shape: {why}")
    return {rec["label"]: int(rec["total"]) for rec in json.loads(proc.stdout)}


def search_rank(method: Method, teacher: Teacher, shape: list[str], target: Target,
                embed_rank: int | None, log=print) -> tuple[int, int, int]:  # fmt: skip
    """The largest rank whose student meets ``target`` (a ratio or a count of total
    parameters): ``(rank, student_params, teacher_params)``, both counted the same way."""
    vocab = teacher.src_vocab
    hi = method.max_rank(teacher)
    counts: dict[int, int] = {}
    counts_teacher: dict[str, int] = {}

    def probe(ranks) -> None:
        specs = {f"r{r}": (method.arch, shape + method.flags(r, embed_rank, teacher))
                 for r in sorted(set(ranks)) if r not in counts}  # fmt: skip
        if not specs:
            return
        if "teacher" not in counts_teacher:
            specs = {"teacher": (teacher.arch, shape), **specs}
        got = count_params(specs, vocab)
        if "teacher" in got:
            counts_teacher["teacher"] = got.pop("teacher")
        counts.update({int(k[1:]): v for k, v in got.items()})

    probe([1, hi])
    t = counts_teacher["teacher"]
    want = int(t / target.ratio) if target.ratio is not None else int(target.params)
    if counts[1] > want:
        raise CompressError(
            f"the smallest {method.name} student of this shape (rank 1) has {counts[1]:,} "
            f"parameters ({t / counts[1]:.2f}x fewer than the teacher's {t:,}): the target "
            f"({target.describe()}, {want:,}) is out of reach; ask for at most "
            f"--ratio {t / counts[1]:.2f}"
        )
    for _ in range(8):
        ok = max(r for r, c in counts.items() if c <= want)
        over = [r for r, c in counts.items() if c > want]
        if not over or min(over) == ok + 1:
            break
        top = min(over)
        c0, c1 = counts[ok], counts[top]
        guess = ok + int((want - c0) * (top - ok) / max(1, c1 - c0))
        probe([r for r in (guess - 1, guess, guess + 1, guess + 2, (ok + top) // 2)
               if ok < r < top])  # fmt: skip
    ok = max(r for r, c in counts.items() if c <= want)
    log(f"rank search: {len(counts)} ranks counted, {ok} is the largest within {want:,} parameters")
    return ok, counts[ok], t


def dawid_sparsity(teacher_path: str, target: Target) -> tuple[float, dict]:
    """DA-WID's target sparsity (1 - student / teacher non-embedding parameters; DA-WID keeps
    the embedding table) for a ratio or count of total parameters."""
    cmd = tool("lightcompress-params") + ["--path", teacher_path, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise CompressError(f"cannot count the teacher: {lines[-1] if lines else proc.returncode}")
    counts = json.loads(proc.stdout)
    if target.sparsity is not None:
        return target.sparsity, counts
    total, emb, rest = counts["total"], counts["embedding"], counts["non_embedding"]
    want = total / target.ratio if target.ratio is not None else target.params
    sparsity = 1 - (want - emb) / rest
    if not 0 < sparsity < 1:
        raise CompressError(
            f"DA-WID keeps the teacher's {emb:,} embedding parameters and prunes the other "
            f"{rest:,}: {target.describe()} ({int(want):,} in all) needs sparsity "
            f"{sparsity:.2f}, outside (0, 1); ask for a total between {emb:,} and {total:,}"
        )
    return round(sparsity, 4), counts
