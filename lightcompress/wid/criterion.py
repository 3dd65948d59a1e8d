"""The ``dawid`` criterion: distillation (Eq. 14-16) plus the Lagrangian sparsity term (Eq. 13).

Per non-padding target token::

    loss = lambda * KL(P_t || P_s) + (1 - lambda) * L_layer + L_prune

``KL`` at temperature ``T`` (times ``T^2``) between the teacher's and the student's output
distributions. The paper writes ``D_KL(P_s || P_t)`` and calls it a cross-entropy; CoFi's code
(which DA-WID builds on) uses ``KL(P_t || P_s)``, the cross-entropy to the teacher's
distribution up to a constant, and so does this criterion.

``L_layer`` (Eq. 15): for every student layer ``i`` of a stack, the MSE between ``W_layer H_s^i``
and the teacher layer ``m(i) = argmin_{j >= i} MSE(W_layer H_s^i, H_t^j)`` (chosen anew on every
batch), summed over the layers of the encoder and the decoder; ``H`` are the layers' outputs (after
the FFN block), ``W_layer`` (one per stack) starts as the identity. Padding positions are left out.

``L_prune`` is on once any mask level is (the model's schedule); it uses the model's expected
sparsity (:func:`lightcompress.wid.fuse.expected_size`) and its linearly warmed target.

The teacher is the model's (``--dawid-teacher``), frozen; it is never part of a checkpoint.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

from lightcompress.errors import ConfigError

__all__ = ["DAWIDCriterion", "DAWIDCriterionConfig", "layer_distillation"]


@dataclass
class DAWIDCriterionConfig(FairseqDataclass):
    dawid_lambda: float = field(
        default=0.5,
        metadata={
            "help": "lambda of Eq. 16: lambda * KL on the outputs + (1 - lambda) * layer MSE"
        },
    )
    dawid_kd_temperature: float = field(
        default=1.0, metadata={"help": "softmax temperature of the output distillation"}
    )
    classification_head_name: str = field(
        default="sentence_classification_head",
        metadata={"help": "sentence_prediction: the classification head to distil"},
    )
    regression_target: bool = field(
        default=False,
        metadata={"help": "sentence_prediction: a regression task (STS-B); the task reads it"},
    )


def _masked_mse(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the positions ``keep`` (T, B) and the features."""
    diff = (a.float() - b.float()) ** 2
    return (diff * keep.unsqueeze(-1)).sum() / (keep.sum().clamp_min(1) * a.shape[-1])


def layer_distillation(student_states, teacher_states, keep, layer_map):
    """``(sum_i MSE(W H_s^i, H_t^{m(i)}), [m(i)...])`` with the dynamic mapping of Eq. 15.

    ``student_states`` / ``teacher_states``: the outputs of the layers, (T, B, d) each;
    ``keep``: (T, B) bool, non-padding positions."""
    keep = keep.float()
    total, mapping = 0.0, []
    for i, hs in enumerate(student_states):
        mapped = layer_map(hs)
        losses = [
            _masked_mse(mapped, teacher_states[j], keep) for j in range(i, len(teacher_states))
        ]
        j = int(torch.stack([loss.detach() for loss in losses]).argmin())
        total = total + losses[j]
        mapping.append(i + j)
    return total, mapping


@register_criterion("dawid", dataclass=DAWIDCriterionConfig)
class DAWIDCriterion(FairseqCriterion):
    def __init__(
        self,
        task,
        dawid_lambda=0.5,
        dawid_kd_temperature=1.0,
        classification_head_name="sentence_classification_head",
        regression_target=False,
    ):
        super().__init__(task)
        self.classification_head_name = classification_head_name
        self.regression_target = regression_target
        if not 0.0 <= dawid_lambda <= 1.0:
            raise ConfigError(f"--dawid-lambda must be in [0, 1], got {dawid_lambda}")
        if not dawid_kd_temperature > 0:
            raise ConfigError(f"--dawid-kd-temperature must be > 0, got {dawid_kd_temperature}")
        self.lam = dawid_lambda
        self.temperature = dawid_kd_temperature

    def forward(self, model, sample, reduce=True):
        from lightcompress.wid.model import DAWIDModel
        from lightcompress.wid.roberta import DAWIDRobertaModel

        if isinstance(model, DAWIDRobertaModel):
            return self.forward_sentence(model, sample)
        if not isinstance(model, DAWIDModel):
            raise ConfigError("--criterion dawid trains an --arch dawid or dawid_roberta model")
        teacher = model.teacher_on_device()
        net = sample["net_input"]
        enc = model.encoder(
            net["src_tokens"], src_lengths=net["src_lengths"], return_all_hiddens=True
        )
        logits, extra = model.decoder(
            net["prev_output_tokens"], encoder_out=enc, src_lengths=net["src_lengths"]
        )
        with torch.no_grad():
            t_enc = teacher.encoder(
                net["src_tokens"], src_lengths=net["src_lengths"], return_all_hiddens=True
            )
            t_logits, t_extra = teacher.decoder(
                net["prev_output_tokens"], encoder_out=t_enc, src_lengths=net["src_lengths"]
            )

        target = sample["target"]
        tgt_keep = target.ne(self.padding_idx)  # [B x T]
        ntokens = int(tgt_keep.sum())
        t = self.temperature
        s_lp = F.log_softmax(logits.float() / t, dim=-1)
        t_lp = F.log_softmax(t_logits.float() / t, dim=-1)
        kl = (t_lp.exp() * (t_lp - s_lp)).sum(-1)  # [B x T]
        kl = (kl * tgt_keep).sum() * (t * t)

        src_keep = net["src_tokens"].ne(self.padding_idx).t()  # [T x B]
        prev_keep = net["prev_output_tokens"].ne(self.padding_idx).t()
        enc_loss, _ = layer_distillation(
            enc["encoder_states"][1:],
            t_enc["encoder_states"][1:],
            src_keep,
            model.layer_map["encoder"],
        )
        dec_loss, _ = layer_distillation(
            extra["inner_states"][1:],
            t_extra["inner_states"][1:],
            prev_keep,
            model.layer_map["decoder"],
        )
        layer_loss = enc_loss + dec_loss

        loss = self.lam * kl + (1.0 - self.lam) * layer_loss * ntokens
        logging_output = {
            "ntokens": sample["ntokens"],
            "nsentences": target.size(0),
            "sample_size": ntokens,
            "kl": float(kl.detach()),
            "layer": float(layer_loss.detach()) * ntokens,
        }
        loss = self._prune(model, loss, ntokens, logging_output)
        logging_output["loss"] = float(loss.detach())
        return loss, ntokens, logging_output

    def _prune(self, model, loss, count, logging_output):
        """Add the Lagrangian (Eq. 13) once a mask level is on, weighted by ``count``."""
        if not model.pruning_on():
            return loss
        expected = model.expected_sparsity()
        target_s = model.target_sparsity()
        lagrangian = model.lagrangian(expected, target_s)
        logging_output.update(
            lagrangian=float(lagrangian.detach()) * count,
            expected_sparsity=float(expected.detach()) * count,
            target_sparsity=target_s * count,
            lambda1=float(model.lagrangian.lambda1.detach()) * count,
            lambda2=float(model.lagrangian.lambda2.detach()) * count,
            pruning_tokens=count,
        )
        return loss + lagrangian * count

    def forward_sentence(self, model, sample):
        """RoBERTa with ``sentence_prediction``: per sentence, ``lambda * KL`` of the class
        distributions (MSE of the outputs for a one-output regression head, as CoFi distils
        STS-B) ``+ (1 - lambda) * L_layer + L_prune``."""
        head = self.classification_head_name
        teacher = model.teacher_on_device()
        src = sample["net_input"]["src_tokens"]
        feats, extra = model.encoder.extract_features(src, return_all_hiddens=True)
        logits = model.classification_heads[head](feats)
        with torch.no_grad():
            t_feats, t_extra = teacher.encoder.extract_features(src, return_all_hiddens=True)
            t_logits = teacher.classification_heads[head](t_feats)
        nsent = src.size(0)
        if self.regression_target or logits.size(-1) == 1:  # STS-B: --regression-target
            pred = ((logits.float() - t_logits.float()) ** 2).sum()
        else:
            t = self.temperature
            s_lp = F.log_softmax(logits.float() / t, dim=-1)
            t_lp = F.log_softmax(t_logits.float() / t, dim=-1)
            pred = (t_lp.exp() * (t_lp - s_lp)).sum() * (t * t)
        keep = src.ne(model.encoder.dictionary.pad()).t()
        layer_loss, _ = layer_distillation(
            extra["inner_states"][1:], t_extra["inner_states"][1:], keep, model.layer_map["encoder"]
        )
        loss = self.lam * pred + (1.0 - self.lam) * layer_loss * nsent
        logging_output = {
            "ntokens": sample["ntokens"],
            "nsentences": nsent,
            "sample_size": nsent,
            "kl": float(pred.detach()),
            "layer": float(layer_loss.detach()) * nsent,
        }
        target = sample.get("target")
        if target is not None and not self.regression_target and logits.size(-1) > 1:
            logging_output["ncorrect"] = int((logits.argmax(-1) == target.view(-1)).sum())
        loss = self._prune(model, loss, nsent, logging_output)
        logging_output["loss"] = float(loss.detach())
        return loss, nsent, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        size = sum(log.get("sample_size", 0) for log in logging_outputs)
        if not size:
            return
        metrics.log_scalar(
            "loss",
            sum(log.get("loss", 0) for log in logging_outputs) / size / math.log(2),
            size,
            round=3,
        )
        metrics.log_scalar(
            "kl", sum(log.get("kl", 0) for log in logging_outputs) / size, size, round=4
        )
        metrics.log_scalar(
            "layer", sum(log.get("layer", 0) for log in logging_outputs) / size, size, round=4
        )
        if any("ncorrect" in log for log in logging_outputs):
            nsent = sum(log.get("nsentences", 0) for log in logging_outputs)
            ncorrect = sum(log.get("ncorrect", 0) for log in logging_outputs)
            metrics.log_scalar("accuracy", 100.0 * ncorrect / max(nsent, 1), nsent, round=1)
        pruned = sum(log.get("pruning_tokens", 0) for log in logging_outputs)
        if pruned:
            for key in ("expected_sparsity", "target_sparsity", "lagrangian", "lambda1", "lambda2"):
                metrics.log_scalar(
                    key, sum(log.get(key, 0) for log in logging_outputs) / pruned, pruned, round=4
                )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return False
