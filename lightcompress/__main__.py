"""``python -m lightcompress --user-dir`` prints the path to pass to fairseq's ``--user-dir``."""

import argparse
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m lightcompress",
        description="lightcompress: compressed Transformers for fairseq.",
    )
    parser.add_argument(
        "--user-dir",
        action="store_true",
        help="print the directory to pass to fairseq's --user-dir and exit",
    )
    args = parser.parse_args(argv)
    if args.user_dir:
        print(os.path.dirname(os.path.abspath(__file__)))
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
