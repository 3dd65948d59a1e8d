"""The KD data's shards and files: the shards' line ranges and data-bins, fairseq-generate's output
read and checked, the merged pairs binarized and their source verified (for :mod:`.distill`)."""

import os
import shutil

from lightcompress.errors import LightcompressError
from lightcompress.io import atomic_directory, atomic_write

__all__ = ["DistillError", "check_shard", "parse_generate_output"]


class DistillError(LightcompressError, RuntimeError):
    """A distillation run that cannot go on (incomplete output, changed settings, ...)."""

    exit_status = 1


def _lines_str(numbers, limit=20):
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f", ... ({len(numbers)} in all)" if len(numbers) > limit else "")


def parse_generate_output(path):
    """Read a fairseq-generate output file: ({id: source}, {id: hypothesis}) of its S-/H- lines."""
    sources, hyps = {}, {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("S-"):
                sid, _, text = line.partition("\t")
                sources[int(sid[2:])] = text
            elif line.startswith("H-"):
                parts = line.split("\t", 2)
                if len(parts) < 2:
                    raise DistillError(f"{path}:{lineno}: malformed hypothesis line {line!r}")
                sid = int(parts[0][2:])
                if sid in hyps:
                    raise DistillError(f"{path}:{lineno}: two hypotheses for sentence {sid}")
                hyps[sid] = parts[2] if len(parts) == 3 else ""
    return sources, hyps


def check_shard(path, offset, size, allow_empty=False):
    """Check that the generate output ``path`` has one source and one non-empty hypothesis for
    each of the ``size`` sentences of its shard; return (sources, hypotheses) in order.

    Errors name the lines of the whole train split (1-based: ``offset + id + 1``).
    """
    sources, hyps = parse_generate_output(path)
    expected = range(size)
    extra = sorted((set(sources) | set(hyps)) - set(expected))
    if extra:
        raise DistillError(
            f"{path}: sentence ids outside the shard's {size} lines: {_lines_str(extra)}; "
            "the shard was not produced from this shard's data. Delete it and rerun"
        )
    no_hyp = [offset + i + 1 for i in expected if i not in hyps]
    no_src = [offset + i + 1 for i in expected if i not in sources]
    if no_hyp or no_src:
        what = no_hyp or no_src
        raise DistillError(
            f"{path}: the teacher's output is incomplete: no {'hypothesis' if no_hyp else 'source'} "
            f"for {len(what)} of {size} source lines; train-split line numbers: {_lines_str(what)}. "
            "Delete this shard file and rerun to translate it again"
        )
    empty = [offset + i + 1 for i in expected if not hyps[i].strip()]
    if empty and not allow_empty:
        raise DistillError(
            f"{path}: empty hypotheses for {len(empty)} source lines; train-split line numbers: "
            f"{_lines_str(empty)}. Rerun with --allow-empty to keep them (target = EOS only)"
        )
    return [sources[i] for i in expected], [hyps[i] for i in expected]


def _train_prefix(data, split, src, tgt):
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data, f"{split}.{pair}.")
        if os.path.exists(prefix + src + ".idx") and os.path.exists(prefix + tgt + ".idx"):
            return prefix
    raise DistillError(f"no binarized {split} split for {src}-{tgt} in {data}")


def _load(prefix, lang):
    from fairseq.data import data_utils

    ds = data_utils.load_indexed_dataset(prefix + lang, None, dataset_impl=None)
    if ds is None:
        raise DistillError(f"cannot read {prefix}{lang}.{{bin,idx}}")
    return ds


def _atomic_write_text(path, lines):
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def _write_shard_data(args, prefix, start, end, shard_dir):
    """A data-bin holding lines [start, end) of the train split as its own train split."""
    from fairseq.data import Dictionary, indexed_dataset

    with atomic_directory(shard_dir) as tmp:
        for lang in (args.source_lang, args.target_lang):
            dict_file = os.path.join(args.data, f"dict.{lang}.txt")
            shutil.copyfile(dict_file, os.path.join(tmp, f"dict.{lang}.txt"))
            ds = _load(prefix, lang)
            out = os.path.join(tmp, f"train.{args.source_lang}-{args.target_lang}.{lang}")
            builder = indexed_dataset.make_builder(
                out + ".bin", impl="mmap", vocab_size=len(Dictionary.load(dict_file))
            )
            for i in range(start, end):
                builder.add_item(ds[i])
            builder.finalize(out + ".idx")


def _shard_bounds(n, num_shards):
    return [(k * n // num_shards, (k + 1) * n // num_shards) for k in range(num_shards)]


def _verify_source(prefix_orig, prefix_new, lang):
    orig, new = _load(prefix_orig, lang), _load(prefix_new, lang)
    if len(orig) != len(new):
        raise DistillError(f"distilled source has {len(new)} lines, the original {len(orig)}")
    for i in range(len(orig)):
        if not orig[i].equal(new[i]):
            raise DistillError(
                f"distilled source line {i + 1} differs from the original train source: the "
                "teacher's output is misaligned or the dictionaries differ"
            )


def _binarize(text_prefix, args, src, tgt) -> None:
    """fairseq-preprocess of the merged pairs with the teacher's dictionaries into ``OUT``, as
    fairseq-preprocess's ``main`` in this process (fairseq is imported already: a command of its
    own spent about 3 s starting). Its INFO lines go to its log file only (OUT/preprocess.log,
    as fairseq-preprocess writes it); a failure is a :class:`DistillError` (a stop ends it as it ends the run: a
    rerun binarizes again)."""
    import logging

    from fairseq import options

    argv = ["--source-lang", src, "--target-lang", tgt, "--trainpref", text_prefix]
    argv += ["--destdir", args.out_dir, "--workers", str(args.workers)]
    argv += ["--srcdict", os.path.join(args.data, f"dict.{src}.txt")]
    argv += ["--tgtdict", os.path.join(args.data, f"dict.{tgt}.txt")]
    pre = options.get_preprocessing_parser().parse_args(argv)
    root = logging.getLogger()
    quiet = [(h, h.level) for h in root.handlers]  # (this run's own: its INFO lines stay out)
    for h, level in quiet:
        h.setLevel(max(level, logging.WARNING))
    # for the log file, whoever configured logging before (a level, logging.disable, or a
    # dictConfig that disabled the loggers that existed then): put back afterwards
    own = logging.getLogger("fairseq_cli.preprocess")
    kept = root.level, logging.root.manager.disable, own.disabled
    root.setLevel(logging.INFO)
    logging.disable(logging.NOTSET)
    own.disabled = False
    try:
        from fairseq_cli import preprocess  # (its import may call logging.basicConfig)

        preprocess.main(pre)
    except Exception as exc:  # (fairseq's own errors: a message, no traceback needed)
        raise DistillError(f"fairseq-preprocess failed: {type(exc).__name__}: {exc}") from exc
    finally:
        for h in root.handlers[:]:  # (main adds a file handler: OUT/preprocess.log, as before)
            if h not in dict(quiet):
                root.removeHandler(h)
                h.close()
        for h, level in quiet:
            h.setLevel(level)
        root.setLevel(kept[0])
        logging.disable(kept[1])
        own.disabled = kept[2]
