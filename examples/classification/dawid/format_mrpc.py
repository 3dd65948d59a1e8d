#!/usr/bin/env python3
"""MRPC in GLUE's layout: train.tsv / dev.tsv from the Microsoft Research Paraphrase Corpus
files and GLUE's list of dev pairs (as GLUE's download script formats it: same header, pairs
listed in dev_ids.tsv go to dev.tsv, the rest to train.tsv).

    python format_mrpc.py --train msr_paraphrase_train.txt --dev-ids mrpc_dev_ids.tsv --out-dir MRPC

Bad input is one error line and exit status 2, with nothing written: a missing file, a row
without GLUE's five tab-separated fields (quality, #1 ID, #2 ID, #1 string, #2 string; GLUE's
script stops there too), or a dev pair the corpus file does not hold (the files do not belong
together).
"""

import argparse
import os
import sys

PROG = "format_mrpc"


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{PROG}: error: {message}\n")


class FormatError(Exception):
    """Bad input: the message is the one error line."""


def read_dev_ids(path: str) -> set:
    ids = set()
    with open(path, encoding="utf-8-sig") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            fields = line.strip().split("\t")
            if len(fields) != 2:
                raise FormatError(
                    f"{path}:{n}: expected two tab-separated ids, got {line.strip()!r}"
                )
            ids.add(tuple(fields))
    if not ids:
        raise FormatError(f"{path} lists no dev pairs")
    return ids


def split_rows(train: str, dev_ids: set):
    """``(header, train rows, dev rows)`` of the corpus file (rows as GLUE writes them)."""
    rows = {"train": [], "dev": []}
    with open(train, encoding="utf-8-sig") as fin:
        header = fin.readline()
        for n, row in enumerate(fin, 2):
            if not row.strip():
                continue
            fields = row.strip().split("\t")
            if len(fields) != 5:
                raise FormatError(
                    f"{train}:{n}: expected 5 tab-separated fields (quality, #1 ID, #2 ID, "
                    f"#1 string, #2 string), got {len(fields)}"
                )
            label, id1, id2, s1, s2 = fields
            part = "dev" if (id1, id2) in dev_ids else "train"
            rows[part].append(f"{label}\t{id1}\t{id2}\t{s1}\t{s2}\n")
    found = len(rows["dev"])
    if found != len(dev_ids):
        raise FormatError(
            f"{train} holds {found} of the {len(dev_ids)} dev pairs of the dev-id list "
            "(the corpus file and the list do not belong together)"
        )
    return header, rows["train"], rows["dev"]


def main(argv=None) -> int:
    p = _OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="msr_paraphrase_train.txt")
    p.add_argument("--dev-ids", required=True, help="GLUE's mrpc_dev_ids.tsv")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args(argv)
    outs = {name: os.path.join(args.out_dir, f"{name}.tsv") for name in ("train", "dev")}
    written = []
    try:
        for path in (args.train, args.dev_ids):
            if not os.path.isfile(path):
                raise FormatError(f"{path} not found")
        try:
            header, train_rows, dev_rows = split_rows(args.train, read_dev_ids(args.dev_ids))
        except UnicodeDecodeError as exc:
            raise FormatError(f"not UTF-8 text ({exc.reason})") from None
        os.makedirs(args.out_dir, exist_ok=True)
        for name, rows in (("train", train_rows), ("dev", dev_rows)):
            tmp = outs[name] + ".tmp"
            written.append(tmp)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(header)
                f.writelines(rows)
        for name in ("train", "dev"):
            os.replace(outs[name] + ".tmp", outs[name])
    except (FormatError, OSError) as exc:
        for tmp in written:
            if os.path.exists(tmp):
                os.remove(tmp)
        msg = str(exc) if isinstance(exc, FormatError) else f"{exc.filename}: {exc.strerror}"
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
