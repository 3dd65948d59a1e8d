"""``lightcompress-compress``: from a trained fairseq Transformer checkpoint to a compressed,
fine-tuned, exported and measured student in one command.

The command is the top layer of the package: it runs the steps that must survive on their own
as subprocesses (``lightcompress-convert``, ``lightcompress-export-onnx``, ``fairseq-train``,
``fairseq-generate``, ``measure_speed``, ``lightcompress.kd.distill``), counts
parameters with the function of ``lightcompress-params``
(:func:`lightcompress.measure.params.checkpoint_report`) and reads checkpoints with
``torch.load(weights_only=True)``; nothing in the package imports it.

- :mod:`lightcompress.compress.teacher`: what the teacher checkpoint and its data-bin say
  (shape, LayerNorm placement, languages), refusals before any work;
- :mod:`lightcompress.compress.methods`: each method's student flags, rank search and
  preconditions;
- :mod:`lightcompress.compress.steps`: running steps (progress lines, logs, resume, lock);
- :mod:`lightcompress.compress.report`: BLEU / chrF, speed, the markdown and PNG report;
- :mod:`lightcompress.compress.plan`: the plan of steps, one planner per phase;
- :mod:`lightcompress.compress.cli`: the command line, running the plan.

See ``docs/compress.md``.
"""

__all__ = ["cli_main"]


def cli_main(argv=None):
    """Entry point of ``lightcompress-compress`` (:func:`lightcompress.compress.cli.cli_main`)."""
    from lightcompress.compress.cli import cli_main as main

    return main(argv)
