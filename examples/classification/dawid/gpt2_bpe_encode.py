#!/usr/bin/env python3
"""GPT-2 BPE-encode text lines for fairseq RoBERTa (what fairseq's
examples/roberta/multiprocessing_bpe_encoder.py --keep-empty does, which is not part of the
installed fairseq package): one line in, one line of BPE ids out, empty lines kept.

    python gpt2_bpe_encode.py --encoder-json encoder.json --vocab-bpe vocab.bpe \\
        --input train.raw.input0 --output train.input0

Each line is stripped of surrounding white space and encoded by fairseq's GPT-2 BPE
(``fairseq.data.encoders.gpt2_bpe_utils``, the code behind ``--bpe gpt2``). Lines end at ``\\n``
only (a stray carriage return does not split a line), so the output has exactly as
many lines as the input, and as the label file cut from the same TSV. The output is written
atomically; bad input (a missing or unreadable file, text that is not UTF-8, a symbol the
encoder.json lacks) is one error line and exit status 2, with nothing written.
"""

import argparse
import os
import sys

PROG = "gpt2_bpe_encode"


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{PROG}: error: {message}\n")


class EncodeError(Exception):
    """Bad input: the message is the one error line."""


def _gpt2_bpe_utils():
    """fairseq's ``fairseq/data/encoders/gpt2_bpe_utils.py`` (json and regex only), loaded from
    its file: importing it as ``fairseq.data.encoders...`` imports the whole fairseq package
    first (torch and every task: about 3 s for each file this script encodes)."""
    import importlib.util

    spec = importlib.util.find_spec("fairseq")  # (finds the package without importing it)
    where = spec.submodule_search_locations if spec is not None else None
    path = os.path.join(next(iter(where)), "data", "encoders", "gpt2_bpe_utils.py") if where else ""
    if not os.path.isfile(path):  # (an unusual install: the package's own import, or its error)
        from fairseq.data.encoders import gpt2_bpe_utils

        return gpt2_bpe_utils
    module_spec = importlib.util.spec_from_file_location("_fairseq_gpt2_bpe_utils", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _load_encoder(encoder_json: str, vocab_bpe: str):
    get_encoder = _gpt2_bpe_utils().get_encoder

    for path in (encoder_json, vocab_bpe):
        if not os.path.isfile(path):
            raise EncodeError(f"{path} not found")
    try:
        bpe = get_encoder(encoder_json, vocab_bpe)
    except (ValueError, UnicodeDecodeError, OSError) as exc:  # JSONDecodeError is a ValueError
        raise EncodeError(
            f"cannot read {encoder_json} / {vocab_bpe} as GPT-2 BPE files "
            f"({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(bpe.encoder, dict) or not all(
        isinstance(v, int) for v in bpe.encoder.values()
    ):
        raise EncodeError(f"{encoder_json} is not a GPT-2 encoder.json (symbol -> integer id)")
    return bpe


def encode_file(bpe, input_path: str, output_path: str) -> int:
    """Encode ``input_path`` into ``output_path`` (atomically); returns the number of lines."""
    if not os.path.isfile(input_path):
        raise EncodeError(f"{input_path} not found")
    out_dir = os.path.dirname(os.path.abspath(output_path))
    if not os.path.isdir(out_dir):
        raise EncodeError(f"the folder of --output {output_path} does not exist")
    tmp = output_path + ".tmp"
    n = 0
    try:
        with open(input_path, "rb") as fin, open(tmp, "w", encoding="utf-8", newline="\n") as fout:
            for n, raw in enumerate(fin, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise EncodeError(
                        f"{input_path}:{n}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                    ) from None
                try:
                    ids = bpe.encode(line.strip())
                except KeyError as exc:
                    raise EncodeError(
                        f"{input_path}:{n}: symbol {exc.args[0]!r} is not in the encoder.json"
                    ) from None
                fout.write(" ".join(map(str, ids)) + "\n")
        os.replace(tmp, output_path)
    except OSError as exc:
        _remove(tmp)
        raise EncodeError(f"{input_path} -> {output_path}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise
    return n


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def main(argv=None) -> int:
    p = _OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--encoder-json", required=True, help="GPT-2's encoder.json")
    p.add_argument("--vocab-bpe", required=True, help="GPT-2's vocab.bpe (the merges)")
    p.add_argument("--input", required=True, help="text, one sentence per line")
    p.add_argument("--output", required=True, help="BPE ids, one line per input line")
    args = p.parse_args(argv)
    try:
        if not os.path.isfile(args.input):
            raise EncodeError(f"{args.input} not found")
        if os.path.exists(args.output) and os.path.samefile(args.input, args.output):
            raise EncodeError("--output is the same file as --input")
        bpe = _load_encoder(args.encoder_json, args.vocab_bpe)
        encode_file(bpe, args.input, args.output)
    except EncodeError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
