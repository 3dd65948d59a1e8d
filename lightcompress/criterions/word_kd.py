"""Word-level knowledge distillation (Kim & Rush, 2016; Hinton et al., 2015).

For every non-padding target position t, with student logits s_t, teacher logits q_t, temperature T
and mixing weight alpha::

    loss = (1 - alpha) * label_smoothed_ce(s_t, y_t) + alpha * T^2 * CE(softmax(q_t / T), softmax(s_t / T))
    CE(p, r) = - sum_v p(v) log r(v)

summed over positions (fairseq's convention; the trainer divides by ``sample_size``). The KD term is
the cross-entropy to the teacher's distribution; it differs from KL(p || r) by the teacher's entropy,
a constant, so the gradients are the same. ``T^2`` keeps the gradient scale independent of T.

The teacher is loaded from ``--kd-teacher-path`` with the task's dictionaries
(``checkpoint_utils.load_model_ensemble``), kept in eval mode without gradients, moved to the
student's device and dtype on first use, and is *not* a submodule: it is neither trained, nor
returned by ``parameters()``, nor written into the student's checkpoint (``state_dict``). Models
with an adaptive softmax are not supported (the temperature is applied to the decoder's logits).
"""

import math
import os
from dataclasses import dataclass, field

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics

from lightcompress.checkpoint import load_for_task
from lightcompress.errors import CheckpointError, ConfigError

__all__ = ["WordKDCriterion", "WordKDCriterionConfig", "load_teacher"]


@dataclass
class WordKDCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    kd_teacher_path: str = field(
        default="",
        metadata={
            "help": "teacher checkpoint (trained with the same dictionaries); loaded with the "
            "task's dictionaries, kept frozen in eval mode, not saved with the student"
        },
    )
    kd_alpha: float = field(
        default=0.5,
        metadata={
            "help": "weight of the KD term: loss = (1 - alpha) * label-smoothed CE + alpha * "
            "T^2 * CE(teacher softmax, student softmax), both at temperature T"
        },
    )
    kd_temperature: float = field(
        default=1.0,
        metadata={"help": "softmax temperature T of teacher and student in the KD term"},
    )


def load_teacher(path, task):
    """Load the teacher ``path`` with ``task``'s dictionaries; frozen, in eval mode, on CPU.

    Building the teacher goes through ``task.build_model``, which for ``--eval-bleu`` would
    replace the task's BLEU generator (built for the student) with one for the teacher; the
    task's generator and tokenizer are therefore restored afterwards.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"--kd-teacher-path: teacher checkpoint {path} not found")
    saved = {k: getattr(task, k) for k in ("sequence_generator", "tokenizer") if hasattr(task, k)}
    try:
        teacher = load_for_task(path, task)
    except CheckpointError as exc:  # size mismatches (other dictionaries), a damaged file, ...
        raise ConfigError(
            f"--kd-teacher-path: cannot load the teacher {path}: {exc} (the teacher must be a "
            f"fairseq checkpoint trained on this task's dictionaries: source "
            f"{len(task.source_dictionary)}, target {len(task.target_dictionary)} types)"
        ) from None
    finally:
        for k, v in saved.items():
            setattr(task, k, v)
    teacher.requires_grad_(False)
    return teacher


@register_criterion("word_kd", dataclass=WordKDCriterionConfig)
class WordKDCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        kd_teacher_path="",
        kd_alpha=0.5,
        kd_temperature=1.0,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not 0.0 <= kd_alpha <= 1.0:
            raise ConfigError(f"--kd-alpha must be in [0, 1], got {kd_alpha}")
        if not kd_temperature > 0:
            raise ConfigError(f"--kd-temperature must be > 0, got {kd_temperature}")
        self.alpha = kd_alpha
        self.temperature = kd_temperature
        # A plain list: nn.Module does not register what it holds, so the teacher stays out of
        # parameters(), state_dict(), .to()/.half() and train()/eval() of the criterion.
        self._teacher = []
        if kd_teacher_path:
            self.set_teacher(load_teacher(kd_teacher_path, task))

    @classmethod
    def build_criterion(cls, cfg, task):
        if not cfg.kd_teacher_path:
            raise ConfigError("--criterion word_kd needs --kd-teacher-path")
        return super().build_criterion(cfg, task)

    @property
    def teacher(self):
        return self._teacher[0] if self._teacher else None

    def set_teacher(self, teacher):
        """Use ``teacher`` (any model with fairseq's forward/get_normalized_probs), frozen."""
        teacher.eval()
        teacher.requires_grad_(False)
        self._teacher = [teacher]

    def _teacher_for(self, model):
        teacher = self.teacher
        if teacher is None:
            raise RuntimeError("word_kd has no teacher (--kd-teacher-path)")
        ref = next(model.parameters(), None)
        tref = next(teacher.parameters(), None)
        if (
            ref is not None
            and tref is not None
            and (tref.device != ref.device or (tref.dtype != ref.dtype and ref.is_floating_point()))
        ):
            teacher.to(device=ref.device, dtype=ref.dtype)
        teacher.eval()
        return teacher

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        ls_loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        teacher = self._teacher_for(model)
        with torch.no_grad():
            teacher_output = teacher(**sample["net_input"])
        kd_loss = self.compute_kd_loss(model, net_output, teacher, teacher_output, sample, reduce)
        loss = (1.0 - self.alpha) * ls_loss + self.alpha * kd_loss

        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "kd_loss": kd_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)
        return loss, sample_size, logging_output

    def compute_kd_loss(self, model, net_output, teacher, teacher_output, sample, reduce=True):
        """T^2 * sum over non-pad positions of CE(teacher softmax, student softmax) at T."""
        t = self.temperature
        # [B x T x V] log-probabilities of the student, probabilities of the teacher, at T
        student_lprobs = model.get_normalized_probs(
            (net_output[0] / t,) + tuple(net_output[1:]), log_probs=True
        )
        teacher_probs = teacher.get_normalized_probs(
            (teacher_output[0].float() / t,) + tuple(teacher_output[1:]),
            log_probs=False,
        )
        target = model.get_targets(sample, net_output)
        if self.ignore_prefix_size > 0:
            student_lprobs = student_lprobs[:, self.ignore_prefix_size :, :]
            teacher_probs = teacher_probs[:, self.ignore_prefix_size :, :]
            target = target[:, self.ignore_prefix_size :]
        pad_mask = target.eq(self.padding_idx)  # [B x T]
        ce = -(teacher_probs.to(student_lprobs) * student_lprobs).sum(dim=-1)  # [B x T]
        ce = ce.masked_fill(pad_mask, 0.0) * (t * t)
        return ce.sum() if reduce else ce.view(-1)

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        kd_sum = sum(log.get("kd_loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        metrics.log_scalar("kd_loss", kd_sum / sample_size / math.log(2), sample_size, round=3)
