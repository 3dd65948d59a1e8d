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

The training data is checked when the task is set up for training (before the model is built),
and again when the train split is loaded: a missing directory or split, a source or target side
missing, unreadable or truncated files, dictionaries other than the task's, token ids outside the
dictionary, or a distilled copy whose sentence count differs from the ground truth's (it must be a
translation of the same train split) each raise :class:`KDDataError` naming the file or directory;
inside ``fairseq-train`` it ends the command with one line, ``fairseq-train: error: ...``, exit
status 2 (the plugin's :class:`~lightcompress.errors.ConfigError` handling). Loading a
trained model (``from_checkpoint``) checks nothing: the distilled data need not exist any more.
"""

import glob
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq import utils
from fairseq.data import ConcatDataset, Dictionary, LanguagePairDataset, data_utils, indexed_dataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import (
    TranslationConfig,
    TranslationTask,
    load_langpair_dataset,
)

from lightcompress.errors import ConfigError

__all__ = [
    "KDDataError",
    "TranslationSeqKDConfig",
    "TranslationSeqKDTask",
    "check_same_dictionary",
    "check_split",
]

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


class KDDataError(ConfigError):
    """Training data of ``translation_seqkd`` that cannot be used; the message names the file.

    A :class:`~lightcompress.errors.ConfigError`: uncaught inside ``fairseq-train`` it
    ends the command with ``fairseq-train: error: <message>`` and exit status 2.
    """


_CHUNK = 1 << 24  # tokens per slice when scanning a .bin for its largest token id


def check_same_dictionary(
    expected: Dictionary, path: str, what: str, other_side: Dictionary | None = None
) -> None:
    """Raise :class:`KDDataError` unless the dictionary file ``path`` has ``expected``'s symbols
    in order. ``other_side`` (the task's dictionary of the other language) only improves the
    message: a file equal to it means source and target dictionaries were swapped."""
    if not os.path.isfile(path):
        raise KDDataError(
            f"{what}: dictionary {path} not found; a distilled data-bin must hold the dictionaries "
            "it was binarized with (fairseq-preprocess --srcdict/--tgtdict writes them)"
        )
    try:
        other = Dictionary.load(path)
    except Exception as exc:
        raise KDDataError(f"{what}: cannot read dictionary {path}: {exc}") from exc
    if other.symbols == expected.symbols:
        return
    if other_side is not None and other.symbols == other_side.symbols:
        detail = "it is the task's dictionary of the other language: source and target swapped"
    elif len(other) != len(expected):
        detail = f"{len(other)} types instead of {len(expected)}"
    else:
        i = next(i for i, (a, b) in enumerate(zip(other.symbols, expected.symbols)) if a != b)
        detail = f"index {i} is {other.symbols[i]!r} instead of {expected.symbols[i]!r}"
    raise KDDataError(
        f"{what}: dictionary {path} differs from the task's ({detail}). Distilled data must be "
        "binarized with the teacher's/student's dictionaries: fairseq-preprocess --srcdict "
        "DATA/dict.SRC.txt --tgtdict DATA/dict.TGT.txt (scripts/distill_data.py does this)"
    )


def _split_prefixes(directory, split, src, tgt, impl, combine=True):
    """The file prefixes fairseq's ``load_langpair_dataset`` reads for ``split`` (``split``,
    ``split1``, ... with ``combine``; either language order in the name)."""
    prefixes = []
    for k in itertools.count():
        split_k = split + (str(k) if k > 0 else "")
        for a, b in ((src, tgt), (tgt, src)):
            prefix = os.path.join(directory, f"{split_k}.{a}-{b}.")
            if indexed_dataset.dataset_exists(prefix + src, impl=impl):
                prefixes.append(prefix)
                break
        else:
            break
        if not combine:
            break
    return prefixes


def _splits_present(directory, src, tgt):
    names = set()
    for a, b in ((src, tgt), (tgt, src)):
        for idx in glob.glob(os.path.join(glob.escape(directory), f"*.{a}-{b}.{src}.idx")):
            names.add(os.path.basename(idx)[: -len(f".{a}-{b}.{src}.idx")])
    return sorted(names)


def _max_token_id(ds):
    """The largest token id stored in an mmap dataset (None for other implementations)."""
    index, buf = getattr(ds, "_index", None), getattr(ds, "_bin_buffer", None)
    if index is None or buf is None or not hasattr(index, "sizes"):
        return None
    total = int(np.asarray(index.sizes, dtype=np.int64).sum())
    if total == 0:
        return None
    tokens = np.frombuffer(buf, dtype=index.dtype, count=total)
    return max(int(tokens[i : i + _CHUNK].max()) for i in range(0, total, _CHUNK))


def _open_side(path, dictionary, impl, what):
    """Open ``path.{bin,idx}`` and check it against ``dictionary``; return its sentence count."""
    files = f"{path}.{{bin,idx}}"
    try:
        ds = data_utils.load_indexed_dataset(path, None, impl)
    except Exception as exc:
        raise KDDataError(f"{what}: cannot read {files}: {exc}") from exc
    if ds is None:
        raise KDDataError(f"{what}: {files} not found")
    index, buf = getattr(ds, "_index", None), getattr(ds, "_bin_buffer", None)
    if index is not None and buf is not None and len(index) > 0:
        pointer, size = index[len(index) - 1]
        if int(pointer) + int(size) * index.dtype().itemsize > len(buf):
            raise KDDataError(
                f"{what}: {path}.bin is shorter than its index says (truncated or not written "
                "completely); binarize it again"
            )
    top = _max_token_id(ds)
    if top is not None and top >= len(dictionary):
        raise KDDataError(
            f"{what}: {path}.bin holds token id {top}, but the task's dictionary has only "
            f"{len(dictionary)} types: it was binarized with another dictionary (source and "
            "target swapped?); binarize it with fairseq-preprocess --srcdict DATA/dict.SRC.txt "
            "--tgtdict DATA/dict.TGT.txt"
        )
    return len(ds)


def check_split(directory, split, src_dict, tgt_dict, src, tgt, impl=None, what=None):
    """Check the binarized ``split`` of ``directory`` as training pairs; return its size.

    Raises :class:`KDDataError` naming the directory or file when the split is missing, a side is
    missing, unreadable or truncated, holds ids outside its dictionary, or the two sides have
    different sentence counts. ``split1``, ``split2``, ... are included as fairseq combines them.
    """
    what = what or f"{directory} split {split}"
    if not os.path.isdir(directory):
        raise KDDataError(f"{what}: directory {directory} not found")
    prefixes = _split_prefixes(directory, split, src, tgt, impl)
    if not prefixes:
        present = _splits_present(directory, src, tgt)
        raise KDDataError(
            f"{what}: no {split} split in {directory}: "
            f"{os.path.join(directory, f'{split}.{src}-{tgt}.{src}')}.{{bin,idx}} not found "
            f"({'splits there: ' + ', '.join(present) if present else f'no {src}-{tgt} splits there'})"
        )
    total = 0
    for prefix in prefixes:
        n_src = _open_side(prefix + src, src_dict, impl, what)
        n_tgt = _open_side(prefix + tgt, tgt_dict, impl, what)
        if n_src != n_tgt:
            raise KDDataError(
                f"{what}: {prefix}{src} has {n_src} sentences but {prefix}{tgt} has {n_tgt}; "
                "both sides must hold the same sentences"
            )
        total += n_src
    return total


@register_task("translation_seqkd", dataclass=TranslationSeqKDConfig)
class TranslationSeqKDTask(TranslationTask):
    """fairseq ``translation`` whose train split mixes ground truth with distilled copies."""

    cfg: TranslationSeqKDConfig

    @classmethod
    def setup_task(cls, cfg: TranslationSeqKDConfig, **kwargs):
        if cfg.kd_data_mode != "gt" and not cfg.kd_distilled_data:
            raise ConfigError(
                f"--kd-data-mode {cfg.kd_data_mode} needs --kd-distilled-data "
                "(colon-separated data-bin directories or split names)"
            )
        if cfg.kd_gt_upsample < 1 or cfg.kd_distilled_upsample < 1:
            raise ConfigError("--kd-gt-upsample and --kd-distilled-upsample must be integers >= 1")
        task = super().setup_task(cfg, **kwargs)
        if not kwargs.get("from_checkpoint"):
            # training (or a command given the KD flags): refuse bad data before the model is
            # built; a model loaded from its checkpoint does not need the training data
            # (the ground truth's train split only if it is there: a command other than
            # fairseq-train may set up this task on a data directory without one)
            paths = utils.split_paths(cfg.data)
            task.check_train_data(paths[0], require_ground_truth=False)
        return task

    def check_train_data(self, data_path, require_ground_truth=True):
        """Check the ground-truth and distilled train splits this task would mix (see the
        module's docstring); raise :class:`KDDataError` on the first problem. Without
        ``require_ground_truth`` a missing ground-truth train split is not an error (and the
        sentence counts are then not compared)."""
        mode, split = self.cfg.kd_data_mode, self.cfg.train_subset
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        impl = self.cfg.dataset_impl
        checked = getattr(self, "_kd_checked", set())
        if data_path in checked:
            return
        gt_size = None
        gt_present = bool(_split_prefixes(data_path, split, src, tgt, impl))
        if gt_present or (mode != "distilled" and require_ground_truth):
            gt_size = check_split(
                data_path,
                split,
                self.src_dict,
                self.tgt_dict,
                src,
                tgt,
                impl,
                what=f"ground truth {data_path}",
            )
        if mode != "gt":
            for directory, kd_split, name in self._distilled_sources(data_path):
                n = check_split(
                    directory,
                    kd_split,
                    self.src_dict,
                    self.tgt_dict,
                    src,
                    tgt,
                    impl,
                    what=f"--kd-distilled-data {name}",
                )
                # with sharded data (DATA1:DATA2...) each epoch's ground truth is one shard
                # and a distilled copy of the whole set cannot match it: no count check then
                sharded = len(utils.split_paths(self.cfg.data)) > 1
                if gt_size is not None and n != gt_size and not sharded:
                    prefix = _split_prefixes(directory, kd_split, src, tgt, impl)[0]
                    gt_prefix = _split_prefixes(data_path, split, src, tgt, impl)[0]
                    raise KDDataError(
                        f"--kd-distilled-data {name}: {prefix}{src}.idx holds {n} sentences, the "
                        f"ground truth {gt_prefix}{src}.idx {gt_size}: a distilled copy must be "
                        "the teacher's translation of this train split, line for line (redo "
                        "it with scripts/distill_data.sh on this data)"
                    )
        if gt_present or mode == "distilled":
            checked.add(data_path)
        self._kd_checked = checked

    def _distilled_sources(self, data_path):
        """[(directory, split, description)] of the distilled copies, dictionaries checked."""
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        sources = []
        for entry in (self.cfg.kd_distilled_data or "").split(":"):
            if not entry:
                continue
            if os.path.isdir(entry) or "/" in entry:
                if not os.path.isdir(entry):
                    where = "" if os.path.isabs(entry) else f" (relative to {os.getcwd()})"
                    raise KDDataError(f"--kd-distilled-data {entry}: no such directory{where}")
                for lang, expected, other in (
                    (src, self.src_dict, self.tgt_dict),
                    (tgt, self.tgt_dict, self.src_dict),
                ):
                    check_same_dictionary(
                        expected,
                        os.path.join(entry, f"dict.{lang}.txt"),
                        f"--kd-distilled-data {entry}",
                        other_side=None if other.symbols == expected.symbols else other,
                    )
                sources.append((entry, self.cfg.train_subset, entry))
            else:  # a split of the ground-truth data directory: same dictionaries by construction
                sources.append((data_path, entry, f"{entry} (a split of {data_path})"))
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
            raise ConfigError("translation_seqkd does not support --load-alignments")

        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        self.check_train_data(data_path)
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
            if part.tgt is None:  # check_train_data refuses this first; kept as a guard
                raise KDDataError(f"{name}: the train split has no target side")

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
