"""``python -m lightcompress``: the ``--user-dir`` path, and the plugin's model flags.

``python -m lightcompress --user-dir`` prints the path to pass to fairseq's ``--user-dir``;
``python -m lightcompress --arch-help ARCH`` prints the plugin's flags of ``ARCH`` with the
values its preset gives them (``fairseq-train --arch ARCH --help`` does not list model flags:
fairseq answers ``--help`` before it knows the architecture); ``--list-archs`` lists every
preset with its paper size.
"""

import argparse
import os
import sys


def _arch_help(arch: str) -> int:
    import dataclasses

    import lightcompress.plugin  # noqa: F401  (registers the models)
    from lightcompress.models.presets import PRESETS

    if arch not in PRESETS and arch in _other_archs():
        return _model_flags_help(arch)
    if arch not in PRESETS:
        close = [a for a in [*PRESETS, *_other_archs()] if arch.split("_")[0] in a][:8]
        print(
            f"python -m lightcompress: error: {arch!r} is not an architecture of the plugin"
            + (f" (similar: {', '.join(close)})" if close else ""),
            file=sys.stderr,
        )
        return 2
    preset = PRESETS[arch]
    print(f"{arch} (fairseq model {preset.model!r}): {preset.doc}\n")
    print("Transformer settings:")
    for key, value in preset.transformer.items():
        shown = "follows the other settings" if callable(value) else value
        print(f"  --{key.replace('_', '-'):34s} {shown}")
    print("\nPlugin flags (preset value; any flag given on the command line wins):")
    for f in dataclasses.fields(preset.config):
        value = getattr(preset.config, f.name)
        print(f"  --{f.name.replace('_', '-'):34s} {value!s:14s} {f.metadata.get('help', '')}")
    return 0


def _other_archs() -> dict[str, str]:
    """The plugin's architectures that are not presets (DA-WID's training and fused models):
    architecture name -> fairseq model name."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

    import lightcompress.plugin  # noqa: F401
    from lightcompress.models.presets import PRESETS

    return {
        arch: ARCH_MODEL_NAME_REGISTRY[arch]
        for arch, cls in ARCH_MODEL_REGISTRY.items()
        if cls.__module__.startswith("lightcompress.") and arch not in PRESETS
    }


def _model_flags_help(arch: str) -> int:
    """The flags of a plugin architecture without a preset: its model's own options."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    cls = ARCH_MODEL_REGISTRY[arch]
    parser = argparse.ArgumentParser(add_help=False)
    cls.add_args(parser)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    print(f"{arch} (fairseq model {_other_archs()[arch]!r}): {doc}\n")
    print("Flags (default; any flag given on the command line wins):")
    for action in parser._actions:
        if not action.option_strings:
            continue
        flag = max(action.option_strings, key=len)
        default = "-" if action.default in (None, argparse.SUPPRESS) else action.default
        print(f"  {flag:36s} {default!s:14s} {action.help or ''}")
    return 0


def _list_archs() -> int:
    import lightcompress.plugin  # noqa: F401
    from lightcompress.models.presets import PRESETS

    for name, preset in PRESETS.items():
        size = f"paper {preset.paper_params}M" if preset.paper_params else ""
        print(f"{name:42s} {preset.model:13s} {size}")
    for name, model in sorted(_other_archs().items()):
        print(f"{name:42s} {model:13s}")
    return 0


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
    parser.add_argument(
        "--arch-help",
        metavar="ARCH",
        help="print the plugin flags of ARCH with its preset values and exit",
    )
    parser.add_argument(
        "--list-archs", action="store_true", help="list the plugin's architectures and exit"
    )
    args = parser.parse_args(argv)
    if args.user_dir:
        print(os.path.dirname(os.path.abspath(__file__)))
        return 0
    if args.arch_help:
        return _arch_help(args.arch_help)
    if args.list_archs:
        return _list_archs()
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
