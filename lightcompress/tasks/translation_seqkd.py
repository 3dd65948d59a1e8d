"""Translation trained on ground truth and sequence-level KD data at once (Kim & Rush, 2016).

Hypoformer (Sec. 5.2) trains its students on the real training set *and* the teacher's beam-search
translations of it, together. This task is fairseq's ``translation`` with the train split replaced by
a mixture:

- ``--kd-data-mode gt``: the ground-truth train split only (plain ``translation``);
- ``--kd-data-mode distilled``: the distilled copies only;
- ``--kd-data-mode both`` (default): ground truth followed by every distilled copy, one dataset.

Distilled copies (``--kd-distilled-data A:B``) are data-bin directories holding the train split
(``train.{src}-{tgt}.{src,tgt}.{bin,idx}`` and ``dict.{src,tgt}.txt``, e.g. written by
``scripts/distill_data.py``), or names of extra splits inside the ground-truth data directory.
Their dictionaries must equal the task's (same symbols at the same indices); the task refuses
anything else. Only the train split is mixed: valid and test are read from the main data
directory, so validation loss and BLEU are measured against the real references.

Mixture weights are integer upsampling ratios (fairseq's ``ConcatDataset`` sample ratios):
``--kd-gt-upsample 2 --kd-distilled-upsample 1`` repeats every ground-truth pair twice and every
distilled pair once per epoch. The epoch length is ``gt_upsample * N_gt + distilled_upsample *
sum(N_distilled)``.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.data import ConcatDataset, Dictionary, LanguagePairDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import (
    TranslationConfig,
    TranslationTask,
    load_langpair_dataset,
)

__all__ = ["TranslationSeqKDConfig", "TranslationSeqKDTask", "check_same_dictionary"]

logger = logging.getLogger(__name__)

KD_DATA_MODES = ChoiceEnum(["gt", "distilled", "both"])


@dataclass
class TranslationSeqKDConfig(TranslationConfig):
    kd_data_mode: KD_DATA_MODES = field(
        default="both",
        metadata={
            "help": "training data: 'gt' = ground truth only, 'distilled' = the distilled copies "
            "only, 'both' = ground truth and every distilled copy together (Hypoformer). "
            "Valid/test always use the real references"
        },
    )
    kd_distilled_data: Optional[str] = field(  # noqa: UP045 (fairseq parses typing.Optional)
        default=None,
        metadata={
            "help": "colon-separated distilled copies of the train split: data-bin directories "
            "(holding train.SRC-TGT.{SRC,TGT}.{bin,idx} binarized with the same dictionaries, "
            "e.g. from scripts/distill_data.py) or names of splits in the ground-truth data "
            "directory (an entry without '/' that is not an existing directory)"
        },
    )
    kd_gt_upsample: int = field(
        default=1,
        metadata={
            "help": "integer sample ratio of the ground-truth pairs in the mixture (each pair "
            "is seen this many times per epoch)"
        },
    )
    kd_distilled_upsample: int = field(
        default=1,
        metadata={
            "help": "integer sample ratio of each distilled copy in the mixture (each "
            "distilled pair is seen this many times per epoch)"
        },
    )


def check_same_dictionary(expected: Dictionary, path: str, what: str) -> None:
    """Raise ``ValueError`` unless the dictionary file ``path`` has ``expected``'s symbols in order."""
    if not os.path.exists(path):
        raise ValueError(
            f"{what}: dictionary {path} not found; a distilled data-bin must hold the dictionaries "
            "it was binarized with (fairseq-preprocess --srcdict/--tgtdict writes them)"
        )
    other = Dictionary.load(path)
    if other.symbols == expected.symbols:
        return
    if len(other) != len(expected):
        detail = f"{len(other)} types instead of {len(expected)}"
    else:
        i = next(i for i, (a, b) in enumerate(zip(other.symbols, expected.symbols)) if a != b)
        detail = f"index {i} is {other.symbols[i]!r} instead of {expected.symbols[i]!r}"
    raise ValueError(
        f"{what}: dictionary {path} differs from the task's ({detail}). Distilled data must be "
        "binarized with the teacher's/student's dictionaries: fairseq-preprocess --srcdict "
        "DATA/dict.SRC.txt --tgtdict DATA/dict.TGT.txt (scripts/distill_data.py does this)"
    )


@register_task("translation_seqkd", dataclass=TranslationSeqKDConfig)
class TranslationSeqKDTask(TranslationTask):
    """fairseq ``translation`` whose train split mixes ground truth with distilled copies."""

    cfg: TranslationSeqKDConfig

    @classmethod
    def setup_task(cls, cfg: TranslationSeqKDConfig, **kwargs):
        if cfg.kd_data_mode != "gt" and not cfg.kd_distilled_data:
            raise ValueError(
                f"--kd-data-mode {cfg.kd_data_mode} needs --kd-distilled-data "
                "(colon-separated data-bin directories or split names)"
            )
        if cfg.kd_gt_upsample < 1 or cfg.kd_distilled_upsample < 1:
            raise ValueError("--kd-gt-upsample and --kd-distilled-upsample must be integers >= 1")
        return super().setup_task(cfg, **kwargs)

    def _distilled_sources(self, data_path):
        """[(directory, split, description)] of the distilled copies, dictionaries checked."""
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        sources = []
        for entry in (self.cfg.kd_distilled_data or "").split(":"):
            if not entry:
                continue
            if os.path.isdir(entry) or "/" in entry:
                if not os.path.isdir(entry):
                    raise FileNotFoundError(f"--kd-distilled-data: directory {entry} not found")
                check_same_dictionary(
                    self.src_dict,
                    os.path.join(entry, f"dict.{src}.txt"),
                    f"distilled data {entry}",
                )
                check_same_dictionary(
                    self.tgt_dict,
                    os.path.join(entry, f"dict.{tgt}.txt"),
                    f"distilled data {entry}",
                )
                sources.append((entry, self.cfg.train_subset, entry))
            else:  # a split of the ground-truth data directory: same dictionaries by construction
                sources.append((data_path, entry, f"{data_path} split {entry}"))
        return sources

    def _load_part(self, data_path, split, combine):
        return load_langpair_dataset(
            data_path,
            split,
            self.cfg.source_lang,
            self.src_dict,
            self.cfg.target_lang,
            self.tgt_dict,
            combine=combine,
            dataset_impl=self.cfg.dataset_impl,
            upsample_primary=self.cfg.upsample_primary,
            left_pad_source=self.cfg.left_pad_source,
            left_pad_target=self.cfg.left_pad_target,
            max_source_positions=self.cfg.max_source_positions,
            max_target_positions=self.cfg.max_target_positions,
            truncate_source=self.cfg.truncate_source,
            num_buckets=0,
            shuffle=True,
            pad_to_multiple=self.cfg.required_seq_len_multiple,
        )

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        mode = self.cfg.kd_data_mode
        if split != self.cfg.train_subset or (mode == "gt" and self.cfg.kd_gt_upsample == 1):
            return super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if self.cfg.load_alignments:
            raise ValueError("translation_seqkd does not support --load-alignments")

        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        parts, ratios, names = [], [], []
        if mode in ("gt", "both"):
            parts.append(self._load_part(data_path, split, combine))
            ratios.append(self.cfg.kd_gt_upsample)
            names.append(f"ground truth {data_path}")
        if mode in ("distilled", "both"):
            for directory, kd_split, name in self._distilled_sources(data_path):
                parts.append(self._load_part(directory, kd_split, combine))
                ratios.append(self.cfg.kd_distilled_upsample)
                names.append(f"distilled {name}")
        for part, name in zip(parts, names):
            if part.tgt is None:
                raise ValueError(f"{name}: the train split has no target side")
        if mode == "both":
            n_gt = len(parts[0])
            for part, name in zip(parts[1:], names[1:]):
                if len(part) != n_gt:
                    logger.warning(f"{name} has {len(part)} pairs, the ground truth {n_gt}")

        src = ConcatDataset([p.src for p in parts], ratios)
        tgt = ConcatDataset([p.tgt for p in parts], ratios)
        self.datasets[split] = LanguagePairDataset(
            src,
            src.sizes,
            self.src_dict,
            tgt,
            tgt.sizes,
            self.tgt_dict,
            left_pad_source=self.cfg.left_pad_source,
            left_pad_target=self.cfg.left_pad_target,
            num_buckets=self.cfg.num_batch_buckets,
            shuffle=True,
            pad_to_multiple=self.cfg.required_seq_len_multiple,
        )
        summary = ", ".join(f"{n}: {len(p)} x{r}" for p, n, r in zip(parts, names, ratios))
        logger.info(f"{split} (kd-data-mode {mode}): {len(src)} pairs = {summary}")
