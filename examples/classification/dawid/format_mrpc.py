"""MRPC in GLUE's layout: train.tsv / dev.tsv from the Microsoft Research Paraphrase Corpus
files and GLUE's list of dev pairs (as GLUE's download script formats it: same header, pairs
listed in dev_ids.tsv go to dev.tsv, the rest to train.tsv).

    python format_mrpc.py --train msr_paraphrase_train.txt --dev-ids mrpc_dev_ids.tsv --out-dir MRPC
"""

import argparse
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="msr_paraphrase_train.txt")
    p.add_argument("--dev-ids", required=True, help="GLUE's mrpc_dev_ids.tsv")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args(argv)
    for path in (args.train, args.dev_ids):
        if not os.path.isfile(path):
            print(f"format_mrpc: error: {path} not found", file=sys.stderr)
            return 2
    with open(args.dev_ids, encoding="utf-8-sig") as f:
        dev_ids = {tuple(line.strip().split("\t")) for line in f if line.strip()}
    os.makedirs(args.out_dir, exist_ok=True)
    outs = {name: os.path.join(args.out_dir, f"{name}.tsv") for name in ("train", "dev")}
    with open(args.train, encoding="utf-8-sig") as fin, open(outs["train"] + ".tmp", "w", encoding="utf-8") as ftrain, open(outs["dev"] + ".tmp", "w", encoding="utf-8") as fdev:  # fmt: skip
        header = fin.readline()
        ftrain.write(header)
        fdev.write(header)
        for row in fin:
            fields = row.rstrip("\n").split("\t")
            if len(fields) != 5:
                continue
            label, id1, id2, s1, s2 = fields
            out = fdev if (id1, id2) in dev_ids else ftrain
            out.write(f"{label}\t{id1}\t{id2}\t{s1}\t{s2}\n")
    for path in outs.values():
        os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
