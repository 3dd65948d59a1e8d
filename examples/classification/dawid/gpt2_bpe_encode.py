"""GPT-2 BPE-encode text lines for fairseq RoBERTa (what fairseq's
examples/roberta/multiprocessing_bpe_encoder.py does, which is not part of the installed
fairseq package): one line in, one line of BPE ids out, empty lines kept.

    python gpt2_bpe_encode.py --encoder-json encoder.json --vocab-bpe vocab.bpe \\
        --input train.raw.input0 --output train.input0
"""

import argparse
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encoder-json", required=True)
    p.add_argument("--vocab-bpe", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

    for path in (args.encoder_json, args.vocab_bpe, args.input):
        if not os.path.isfile(path):
            print(f"gpt2_bpe_encode: error: {path} not found", file=sys.stderr)
            return 2
    bpe = get_encoder(args.encoder_json, args.vocab_bpe)
    tmp = args.output + ".tmp"
    with open(args.input, encoding="utf-8") as fin, open(tmp, "w", encoding="utf-8") as fout:
        for line in fin:
            ids = bpe.encode(line.strip())
            fout.write(" ".join(map(str, ids)) + "\n")
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
