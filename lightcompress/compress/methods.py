"""The methods ``lightcompress-compress`` can apply to a dense teacher: each one's student flags
at a rank, its preconditions on the teacher, and the rank search for a parameter target.

Counting builds each model with random weights in this process, with the teacher's source and
target dictionary sizes (joined or separate), and counts its parameters once each
(:func:`lightcompress.modules.counting.count_parameters`): the search evaluates a few ranks per
round, interpolating (counts grow about linearly in the rank) and bracketing until the largest
rank within the target is known exactly.
"""

from __future__ import annotations

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
    """One compression method: its student architecture and what it needs of the teacher.

    ``default_ratio`` is the method's default target (teacher / student total parameters) when
    none is given: one it reaches on a standard teacher with the default student shape (the
    teacher's encoder, one decoder layer). ``None``: the method's natural size instead, its
    rank at ``natural_rank`` x the model width (Smartformer, which factorizes only Q/K/V)."""

    name: str
    arch: str
    rank_name: str  # what the searched rank is, in the method's words
    needs_post_ln: bool = False
    default_ratio: float | None = 4.0
    natural_rank: float = 0.0
    # sequence-level KD by default: on where it was measured to help the student (LightFormer:
    # +1.47 BLEU at 1,000 updates on the converged results teacher, docs/compress.md) or its
    # paper trains with it (Hypoformer); off for Smartformer (its rank search has its own task)
    # and DA-WID (its criterion distils from the teacher during training)
    kd_default: bool = True

    def max_rank(self, teacher: Teacher) -> int:
        s = teacher.settings
        d = min(s["encoder_embed_dim"], s["decoder_embed_dim"])
        if self.name == "hypoformer":
            return max(1, min(d, s["encoder_ffn_embed_dim"], s["decoder_ffn_embed_dim"]) - 1)
        return max(1, d - 1)

    def default_rank(self, teacher: Teacher) -> int:
        d = min(teacher.settings["encoder_embed_dim"], teacher.settings["decoder_embed_dim"])
        return max(1, min(self.max_rank(teacher), round(self.natural_rank * d)))

    def flags(self, rank: int, embed_rank: int | None, teacher: Teacher) -> list[str]:
        """The method's own student flags at ``rank`` (the shape flags come separately)."""
        if self.name == "lightformer":
            d = teacher.settings["encoder_embed_dim"]
            e = embed_rank if embed_rank is not None else max(1, min(2 * rank, d // 2))
            return [
                "--lc-encoder-groups",
                "0",
                "--lc-decoder-groups",
                "0",
                "--lc-rank",
                str(rank),
                "--lc-embed-rank",
                str(e),
            ]
        if self.name == "hypoformer":
            # keeping the attention output projections lets the teacher's be transferred;
            # Admin (the paper's initialisation) is a post-LN method: a pre-LN teacher's
            # student keeps its LayerNorm placement and plain residuals
            admin = [] if teacher.post_ln else ["--admin-init", "none"]
            return ["--hypo-attn-out-proj", "--hypo-ffn-rank", str(rank), *admin]
        if self.name == "smartformer":
            return ["--sm-rank", str(rank), "--sm-attn", "all"]
        raise AssertionError(self.name)

    def check(self, teacher: Teacher) -> None:
        """Refuse a teacher this method cannot take, naming a way out that takes it."""
        if self.needs_post_ln and not teacher.post_ln:
            raise CompressError(
                f"the teacher is pre-LN (--encoder/decoder-normalize-before) and {self.name} "
                "needs a post-LN teacher (its compactors and masks sit around the LayerNorms of "
                "a post-LN layer): use --method lightformer (the default), hypoformer or "
                "smartformer, which take pre-LN teachers"
            )


METHODS = {
    "lightformer": Method("lightformer", "lightformer", "rank of every attention / FFN map"),
    "hypoformer": Method("hypoformer", "hypoformer", "rank of the FFN maps", default_ratio=3.0),
    "smartformer": Method(
        "smartformer",
        "smartformer",
        "CP rank of every Q/K/V map",
        default_ratio=None,
        natural_rank=0.25,
        kd_default=False,
    ),
    "dawid": Method("dawid", "dawid", "", needs_post_ln=True, kd_default=False),
}
SUBFORMER_REFUSAL = (
    "Subformer has no weight transfer from a dense teacher (its sandwich sharing and SAFE "
    "embedding have nothing to inherit): train it from scratch with the recipes in "
    "examples/translation/subformer/, or compress this teacher with --method lightformer, "
    "hypoformer, smartformer or dawid"
)


def count_params(
    specs: dict[str, tuple[str, list[str]]], src_vocab: int, tgt_vocab: int | None = None
) -> dict[str, int]:
    """Total parameters of each ``label -> (arch, flags)`` built with random weights at these
    dictionary sizes (``tgt_vocab`` None: one joined dictionary)."""
    import contextlib
    import io

    from lightcompress.build import build_model_without_data, parse_model_args
    from lightcompress.modules.counting import count_parameters

    out = {}
    for label, (arch, flags) in specs.items():
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                args = parse_model_args(arch, ["-s", "src", "-t", "tgt", *flags])
                model = build_model_without_data(args, src_vocab, tgt_vocab)
        except Exception as exc:  # noqa: BLE001  (any build failure: one line)
            why = " ".join(str(exc).split())[:200]
            raise CompressError(
                f"the {label} model cannot be built from this teacher's shape: {why}"
            ) from None
        out[label] = int(count_parameters(model)["total"])
    return out


def search_rank(
    method: Method,
    teacher: Teacher,
    shape: list[str],
    target: Target,
    embed_rank: int | None,
    log=print,
    teacher_shape: list[str] | None = None,
) -> tuple[int, int, int]:
    """The largest rank whose student (of ``shape``) meets ``target`` (a ratio or a count of
    total parameters): ``(rank, student_params, teacher_params)``, both counted the same way
    (the teacher with ``teacher_shape``, default ``shape``)."""
    vocab = (
        teacher.src_vocab,
        teacher.tgt_vocab if teacher.tgt_vocab != teacher.src_vocab else None,
    )
    hi = method.max_rank(teacher)
    counts: dict[int, int] = {}
    t = count_params({"teacher": (teacher.arch, teacher_shape or shape)}, *vocab)["teacher"]

    def probe(ranks) -> None:
        specs = {
            f"r{r}": (method.arch, shape + method.flags(r, embed_rank, teacher))
            for r in sorted(set(ranks))
            if r not in counts
        }
        if specs:
            counts.update({int(k[1:]): v for k, v in count_params(specs, *vocab).items()})

    probe([1, hi])
    want = int(t / target.ratio) if target.ratio is not None else int(target.params)
    if counts[1] > want:
        raise CompressError(
            f"the smallest {method.name} student of this shape (rank 1) has {counts[1]:,} "
            f"parameters ({t / counts[1]:.2f}x fewer than the teacher's {t:,}): the target "
            f"({target.describe()}, {want:,}) is out of reach; ask for at most "
            f"--ratio {int(t / counts[1] * 100) / 100:.2f}"
        )
    for _ in range(12):
        ok = max(r for r, c in counts.items() if c <= want)
        over = [r for r, c in counts.items() if c > want]
        if not over or min(over) == ok + 1:
            break
        top = min(over)
        c0, c1 = counts[ok], counts[top]
        guess = ok + int((want - c0) * (top - ok) / max(1, c1 - c0))
        probe(
            [r for r in (guess - 1, guess, guess + 1, guess + 2, (ok + top) // 2) if ok < r < top]
        )
    ok = max(r for r, c in counts.items() if c <= want)
    log(f"rank search: {len(counts)} ranks counted, {ok} is the largest within {want:,} parameters")
    return ok, counts[ok], t


def dawid_sparsity(teacher_path: str, target: Target) -> tuple[float, dict]:
    """DA-WID's target sparsity (1 - student / teacher non-embedding parameters; DA-WID keeps
    the embedding table) for a ratio or count of total parameters."""
    from lightcompress.measure.params import checkpoint_report
    from lightcompress.measure.specs import ParamsError

    try:
        counts = checkpoint_report(teacher_path)
    except (ParamsError, ValueError) as exc:
        raise CompressError(f"cannot count the teacher: {exc}") from None
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
