"""fairseq ``translation`` with Smartformer's rank search during training (``--sm-search``).

``fairseq-train --task translation_smartformer --sm-search --arch smartformer_iwslt_de_en ...``
trains as ``translation`` does and, every action interval, lets an A2C agent choose the CP rank
of the least important attention layer (:mod:`lightcompress.search`). Without ``--sm-search``
the task is plain ``translation``. Where the search hooks in:

- ``optimizer_step``: after the trainer has averaged (``--update-freq``), unscaled (``--fp16``)
  and clipped the gradient, each open layer's importance is accumulated, the optimizer steps,
  and at the end of an interval the task measures the metric on the validation subset
  (``--sm-search-metric loss``: token-level NLL in base 2 of the reference, no label
  smoothing; ``bleu``: fairseq's ``--eval-bleu`` decoding and detokenization), takes the
  decision, and swaps replaced parameters inside the trainer's optimizer
  (:func:`~lightcompress.search.optim.replace_parameters`);
- ``--sm-search-unit epochs``: the decision is taken after the first update of every N-th
  epoch (the task sees epoch boundaries at ``begin_epoch``), importance covering the epochs
  in between;
- checkpoints: the search's state is the task state fairseq saves (``task_state``); the model's
  CP factors are saved at their current ranks and a plugin model resizes its CP layers to the
  saved ranks when it loads (so ``fairseq-generate``, ``lightcompress-params`` and
  ``scripts/measure_speed.sh`` read the searched model as it is). fairseq's trainer does not
  hand the task state back on resume, so the task reads it from the checkpoint fairseq resumed
  from (the same choice of file as ``fairseq.checkpoint_utils.load_checkpoint``);
- decisions: one line in the training log and one JSON line in ``--sm-search-log`` (default
  ``SAVE_DIR/rank_search.jsonl``); ``scripts/plot_rank_search.py`` plots them. On resume the
  file is cut back to the decisions the checkpoint knows.

The search runs on one worker (data-parallel training replaces parameters under a
DistributedDataParallel wrapper, which cannot follow): more than one is refused.
"""

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from lightcompress.errors import ConfigError
from lightcompress.io import atomic_write
from lightcompress.search import RankSearch, SearchConfig, replace_parameters

__all__ = ["TranslationSmartformerConfig", "TranslationSmartformerTask", "parse_ranks"]

logger = logging.getLogger(__name__)


def parse_ranks(text: str) -> list[int]:
    """``"16,32,64"`` -> ``[16, 32, 64]``; one :class:`ConfigError` for anything else."""
    items = [t.strip() for t in str(text or "").split(",") if t.strip()]
    if not items:
        raise ConfigError("--sm-search-ranks is empty: give the ranks the agent may choose")
    ranks = []
    for t in items:
        try:
            ranks.append(int(t))
        except ValueError:
            raise ConfigError(f"--sm-search-ranks: {t!r} is not an integer") from None
    return ranks


@dataclass
class TranslationSmartformerConfig(TranslationConfig):
    sm_search: bool = field(
        default=False,
        metadata={"help": "search each attention layer's CP rank with Smartformer's A2C agent"},
    )
    sm_search_ranks: str = field(
        default="16,32,64,96,128",
        metadata={"help": "comma-separated CP ranks the agent chooses from (its action space)"},
    )
    sm_search_interval: int = field(
        default=200, metadata={"help": "action interval, in --sm-search-unit"}
    )
    sm_search_unit: ChoiceEnum(["updates", "epochs"]) = field(
        default="updates", metadata={"help": "unit of the action interval"}
    )
    sm_search_metric: ChoiceEnum(["loss", "bleu"]) = field(
        default="loss",
        metadata={
            "help": "reward metric on the validation subset: loss (NLL of the reference) or "
            "bleu (needs --eval-bleu and its detokenization flags)"
        },
    )
    sm_search_epsilon: float = field(
        default=0.1,
        metadata={
            "help": "tolerance of Eq. 27 in (0, 1]: a change of the metric within this "
            "relative amount is rewarded; larger compresses more"
        },
    )
    sm_search_settle: int = field(
        default=5, metadata={"help": "a layer is settled after this many equal actions"}
    )
    sm_search_gamma: float = field(default=0.95, metadata={"help": "A2C discount"})
    sm_search_lr: float = field(default=1e-3, metadata={"help": "Adam learning rate of the agent"})
    sm_search_valid_batches: int = field(
        default=0,
        metadata={"help": "validation batches per measurement (0 = the whole valid subset)"},
    )
    sm_search_refit_iters: int = field(
        default=50,
        metadata={
            "help": "at most this many CP-ALS iterations (warm-started from the current "
            "factors) when a rank changes"
        },
    )
    sm_search_log: Optional[str] = field(  # noqa: UP045 (fairseq parses typing.Optional)
        default=None,
        metadata={"help": "JSON-lines decision log (default: SAVE_DIR/rank_search.jsonl)"},
    )
    sm_search_seed: int = II("common.seed")
    sm_save_dir: str = II("checkpoint.save_dir")
    sm_restore_file: str = II("checkpoint.restore_file")
    sm_finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")  # noqa: UP045
    sm_world_size: int = II("distributed_training.distributed_world_size")
    sm_valid_subset: str = II("dataset.valid_subset")
    sm_max_tokens_valid: Optional[int] = II("dataset.max_tokens_valid")  # noqa: UP045
    sm_batch_size_valid: Optional[int] = II("dataset.batch_size_valid")  # noqa: UP045


@register_task("translation_smartformer", dataclass=TranslationSmartformerConfig)
class TranslationSmartformerTask(TranslationTask):
    """fairseq ``translation`` plus Smartformer's rank search (module docstring)."""

    cfg: TranslationSmartformerConfig

    @classmethod
    def setup_task(cls, cfg: TranslationSmartformerConfig, **kwargs):
        if cfg.sm_search and not kwargs.get("from_checkpoint"):
            cls.search_config(cfg).check()
            if (cfg.sm_world_size or 1) > 1:
                raise ConfigError(
                    "--sm-search runs on one worker: a rank change replaces parameters, which "
                    "a data-parallel wrapper cannot follow (use one GPU/process, and "
                    "--update-freq for a larger batch)"
                )
            if cfg.sm_search_metric == "bleu" and not cfg.eval_bleu:
                raise ConfigError(
                    "--sm-search-metric bleu needs --eval-bleu (with --eval-bleu-detok, "
                    "--eval-bleu-remove-bpe ... as for fairseq's validation BLEU)"
                )
            if cfg.sm_search_valid_batches < 0:
                raise ConfigError("--sm-search-valid-batches must be >= 0")
            log = cfg.sm_search_log
            if log:  # (checked now, not at the first decision after many updates)
                parent = os.path.dirname(os.path.abspath(log))
                if os.path.isdir(log) or not os.path.isdir(parent):
                    raise ConfigError(f"--sm-search-log {log}: not a file in an existing directory")
                try:
                    with open(log, "a", encoding="utf-8"):
                        pass
                except OSError as exc:
                    raise ConfigError(
                        f"--sm-search-log {log}: cannot write ({exc.strerror})"
                    ) from None
        task = super().setup_task(cfg, **kwargs)
        task.search = None
        task._epoch = 0
        task._epoch_due = False
        task._restored = False
        return task

    @staticmethod
    def search_config(cfg) -> SearchConfig:
        return SearchConfig(
            ranks=parse_ranks(cfg.sm_search_ranks),
            interval=cfg.sm_search_interval,
            unit=str(cfg.sm_search_unit),
            metric=str(cfg.sm_search_metric),
            epsilon=cfg.sm_search_epsilon,
            settle=cfg.sm_search_settle,
            gamma=cfg.sm_search_gamma,
            lr=cfg.sm_search_lr,
            refit_iters=cfg.sm_search_refit_iters,
            seed=int(cfg.sm_search_seed if cfg.sm_search_seed is not None else 1),
        )

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.sm_search and not from_checkpoint:
            self.search = RankSearch(
                model,
                self.search_config(self.cfg),
                higher_is_better=self.cfg.sm_search_metric == "bleu",
            )
            logger.info(
                "rank search over %d attention layers, ranks %s, every %d %s, metric %s",
                len(self.search.layers),
                self.search.ranks,
                self.cfg.sm_search_interval,
                self.cfg.sm_search_unit,
                self.search.metric_name,
            )
        return model

    # -- checkpoint state ---------------------------------------------------------------------

    def state_dict(self):
        state = super().state_dict()
        if self.search is not None:
            state = dict(state)
            state["rank_search"] = self.search.state_dict()
        return state

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        saved = state_dict.pop("rank_search", None)
        super().load_state_dict(state_dict)
        if saved is not None and self.search is not None:
            self.search.load_state_dict(saved)

    def resumed_checkpoint(self) -> str | None:
        """The file fairseq-train resumed from (``checkpoint_utils.load_checkpoint``'s choice),
        or None when it started afresh."""
        cfg = self.cfg
        if cfg.sm_restore_file == "checkpoint_last.pt":
            path = os.path.join(cfg.sm_save_dir, "checkpoint_last.pt")
            if not os.path.exists(path):
                path = cfg.sm_finetune_from_model  # first launch of a fine-tuning run
        else:
            path = cfg.sm_restore_file
        return path if path and os.path.isfile(path) else None

    def _restore(self) -> None:
        self._restored = True
        path = self.resumed_checkpoint()
        if path is None:
            return
        state = torch.load(path, map_location="cpu", weights_only=True)
        saved = (state.get("task_state") or {}).get("rank_search")
        del state  # the model's weights: fairseq has loaded them already
        if saved is None:
            logger.info("rank search starts afresh (%s holds no search state)", path)
            return
        self.search.load_state_dict(saved)
        logger.info(
            "rank search resumed from %s: %d decisions, ranks %s%s",
            path,
            self.search.decisions,
            self.search.current_ranks(),
            " (finished)" if self.search.done else "",
        )
        self._truncate_log(self.search.decisions)

    # -- the decision log ---------------------------------------------------------------------

    def log_path(self) -> str:
        return self.cfg.sm_search_log or os.path.join(self.cfg.sm_save_dir, "rank_search.jsonl")

    def _truncate_log(self, keep: int) -> None:
        path = self.log_path()
        if not os.path.exists(path):
            return
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        if len(lines) > keep:  # decisions of a run killed after its last checkpoint
            with atomic_write(path) as f:
                f.writelines(lines[:keep])

    def _append_log(self, record: dict) -> None:
        path = self.log_path()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    # -- training hooks -----------------------------------------------------------------------

    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        if self.search is None:
            return
        if not self._restored:
            self._restore()
        if self.cfg.sm_search_unit == "epochs" and epoch > 1:
            self._epoch_due = (epoch - 1) % self.cfg.sm_search_interval == 0
        self._epoch = epoch

    def optimizer_step(self, optimizer, model, update_num):
        search = self.search
        if search is None or search.done:
            return super().optimizer_step(optimizer, model, update_num)
        if not self._restored:
            self._restore()
        # the gradient the optimizer applies: fairseq's fp16 optimizers keep a pending factor
        # (1 / loss scale, the --update-freq average and clipping) on the fp16 gradients
        scale = getattr(optimizer, "_multiply_factor", 1.0)
        search.accumulate(float(scale))
        super().optimizer_step(optimizer, model, update_num)
        done_updates = update_num + 1
        if self.cfg.sm_search_unit == "epochs":
            due, self._epoch_due = self._epoch_due, False
        else:
            due = done_updates - search.last_decision_update >= self.cfg.sm_search_interval
        if not due:
            return
        start = time.perf_counter()
        metric = self.search_metric(model)
        metric_seconds = time.perf_counter() - start
        decision, mapping = search.decide(model, metric, done_updates, self._epoch)
        if decision is None:
            return
        swapped = replace_parameters(optimizer, mapping)
        if swapped != len(mapping):
            raise RuntimeError(
                f"the optimizer held {swapped} of the {len(mapping)} replaced CP factors"
            )
        logger.info(decision.line())
        record = decision.as_dict()
        record["ranks"] = search.current_ranks()
        record["metric_seconds"] = metric_seconds
        self._append_log(record)
        if decision.done:
            logger.info("rank search finished: ranks %s", search.current_ranks())

    # -- the reward metric --------------------------------------------------------------------

    def _valid_batches(self, model):
        subset = self.cfg.sm_valid_subset.split(",")[0]
        if subset not in self.datasets:  # e.g. --disable-validation: fairseq did not load it
            self.load_dataset(subset, combine=False, epoch=1)
        dataset = self.dataset(subset)
        itr = self.get_batch_iterator(
            dataset=dataset,
            max_tokens=self.cfg.sm_max_tokens_valid,
            max_sentences=self.cfg.sm_batch_size_valid,
            max_positions=utils.resolve_max_positions(self.max_positions(), model.max_positions()),
            ignore_invalid_inputs=True,
            seed=1,
            num_workers=0,
            disable_iterator_cache=True,  # never advance the trainer's own valid iterator
        ).next_epoch_itr(shuffle=False)
        limit = self.cfg.sm_search_valid_batches
        device = next(model.parameters()).device
        for i, sample in enumerate(itr):
            if limit and i >= limit:
                break
            if not sample:
                continue
            yield utils.apply_to_sample(lambda t: t.to(device), sample)

    @torch.no_grad()
    def search_metric(self, model) -> float:
        """The validation metric the reward compares (module docstring)."""
        was_training = model.training
        model.eval()
        try:
            if self.cfg.sm_search_metric == "bleu":
                return self._valid_bleu(model)
            return self._valid_nll(model)
        finally:
            model.train(was_training)

    def _valid_nll(self, model) -> float:
        pad = self.tgt_dict.pad()
        total, count = 0.0, 0
        for sample in self._valid_batches(model):
            out = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(out, log_probs=True).float()
            target = sample["target"]
            nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            mask = target.ne(pad)
            total += float(nll[mask].sum())
            count += int(mask.sum())
        if count == 0:
            raise ConfigError("the validation subset is empty: the rank search has no metric")
        return total / count / math.log(2)

    def _valid_bleu(self, model) -> float:
        from sacrebleu.metrics import BLEU

        counts, totals, sys_len, ref_len = [0] * 4, [0] * 4, 0, 0
        for sample in self._valid_batches(model):
            bleu = self._inference_with_bleu(self.sequence_generator, sample, model)
            counts = [a + b for a, b in zip(counts, bleu.counts)]
            totals = [a + b for a, b in zip(totals, bleu.totals)]
            sys_len += bleu.sys_len
            ref_len += bleu.ref_len
        if ref_len == 0:
            raise ConfigError("the validation subset is empty: the rank search has no metric")
        score = BLEU.compute_bleu(
            correct=counts, total=totals, sys_len=sys_len, ref_len=ref_len, smooth_method="exp"
        )
        return float(score.score)
