#!/usr/bin/env python
"""The converged plan (issue 42): every method trained from the shipped converged teacher
(``teacher/``), at one stated budget, evaluated the same way, one table.

    python lab/results/converged.py plan           # every row and its commands
    python lab/results/converged.py run [ROW ...]  # train + score (resumable)
    python lab/results/converged.py status         # where every row stands
    python lab/results/converged.py speed          # one interleaved speed run
    python lab/results/converged.py table          # results.md, README's block
    python lab/results/converged.py record ROW DIR # a finished compress run's row

Rows (in the order ``run`` trains them; each from ``teacher/checkpoint.pt``):

- ``default``: ``lightcompress-compress`` as a user runs it (its default method, student shape,
  target and recipe), with this plan's budget;
- ``teacher_control``: the control for extra training: the shipped teacher itself fine-tuned
  from its checkpoint with the default row's own fairseq-train command (the students' data, KD
  data, schedule, budget and patience), its architecture the teacher's; the students that end
  above the teacher are compared with it;
- ``lightformer_keep_depth``: the same at the teacher's depth (``--keep-depth``);
- ``lightformer_random``: the default student's own fairseq-train command without
  ``--finetune-from-model`` (random initialisation, equal updates: the SVD-transfer claim);
- ``hypoformer_kd`` / ``hypoformer``: ``--method hypoformer`` with and without sequence-level KD;
- ``smartformer_search``: ``--method smartformer --search-ranks 32,64,128``: the A2C rank
  search picks each layer's CP rank (around the natural rank d / 4 = 64) while it fine-tunes;
- ``smartformer``: the fixed CP rank that gives the searched model's size (equal size);
- ``dawid``: ``--method dawid --params``: the teacher's embeddings (DA-WID keeps them) plus the
  default student's non-embedding parameters (LightFormer's layers' size), at the default row's
  budget and patience;
- ``subformer``: trained from scratch (sandwich sharing, SAFE, the plugin's default
  initialisation) at the teacher's width and 6-6 depth with the teacher's own recipe and token
  budget, read from the shipped checkpoint (its batch of tokens, optimizer, learning-rate
  schedule, dropout, validation every epoch and patience, until early stopping): the row the
  Subformer claim is decided on.

Two diagnostic rows (run only when named; their JSON keeps what they measured): the Subformer
with its paper's schedule (Adam (0.9, 0.999), lr 5e-4, 4,096-token batches) and the authors'
BERT initialisation (``subformer_bert_init``: did not learn to read its source) or fairseq's
(``subformer_fairseq_init``; lab/notes/subformer-source.md).

Every row trains at most ``--max-update`` updates (default: the row's own budget: 7,000 for the
rows from the teacher; 20,000, its schedule still set for 7,000, for the rows the first run
stopped at 7,000 while they still improved and the control compared with them; the subformer
row the teacher's), validates every ``--validate-every`` (500) and stops early after
``--patience`` (4) validations without a lower loss; its state lives in ``--save-root``
(outside the checkout: rerun the same command after any stop and each row goes on from its
last checkpoint; two ``run`` commands, e.g. one per core, share the rows: a row another process
is training is skipped; the state lasts as long as the machine, a fresh one starts unfinished
rows again; a compress row that ended short of its target goes on from its checkpoint with
``--continue-from`` and ``--schedule-updates``), and each finished row is written to
``--rows-dir`` (``converged/ROW.json``, committed; its commands and paths name the checkout's
files relative to it and this machine's folders as DATA, the corpus, and SAVE, the save root).
``speed`` times the teacher and every finished row in one interleaved run (fairseq, ONNX
Runtime, CTranslate2 on the dense teacher, with and without the shared vocabulary shortlist;
batch 1 and 32; one thread) and ``table`` builds ``results.md`` (and, with ``--readme``, the
README's block) from the committed JSON alone.

Bad input is one line on stderr and exit status 2; a failed step, exit status 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lightcompress"
)
# the committed rows and the shipped teacher stay beside the product (README links them)
RESULTS_DIR = os.path.join(REPO_ROOT, "examples", "translation", "results")
TEACHER_DIR = os.path.join(RESULTS_DIR, "teacher")
ROWS_DIR = os.path.join(RESULTS_DIR, "converged")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))

ROWS = [
    "default",
    "teacher_control",
    "lightformer_keep_depth",
    "lightformer_random",
    "hypoformer_kd",
    "hypoformer",
    "smartformer_search",
    "smartformer",
    "dawid",
    "subformer",
    "subformer_bert_init",
    "subformer_fairseq_init",
]
# rows that measure why another row failed: `run` trains them only when they are named
DIAGNOSTIC = ("subformer_bert_init", "subformer_fairseq_init")
WHAT = {
    "default": "lightcompress-compress, its defaults (LightFormer SVD transfer, 3-1, 4x fewer)",
    "teacher_control": "the control: the shipped teacher itself fine-tuned with the default "
    "row's fairseq-train command (the students' data, KD data, schedule and budget)",
    "lightformer_keep_depth": "LightFormer SVD transfer at the teacher's depth (--keep-depth)",
    "lightformer_random": "the default student from random initialisation (equal updates)",
    "hypoformer_kd": "Hypoformer (TT transfer) with sequence-level KD",
    "hypoformer": "Hypoformer (TT transfer) without KD",
    "smartformer_search": "Smartformer, CP ranks chosen by the A2C rank search",
    "smartformer": "Smartformer, one fixed CP rank at the searched model's size",
    "dawid": "DA-WID (compactors and masks, fused), the teacher's embeddings and the default "
    "student's non-embedding parameters",
    "subformer": "Subformer (sandwich sharing + SAFE) from scratch with the plugin's default "
    "initialisation and the teacher's own recipe and token budget, until early stopping",
    "subformer_bert_init": "diagnostic: Subformer from scratch with its paper's schedule and the "
    "authors' BERT initialisation (the plugin's default when it ran; "
    "lab/notes/subformer-source.md)",
    "subformer_fairseq_init": "diagnostic: subformer_bert_init's command with fairseq's "
    "initialisation (--subformer-init fairseq; lab/notes/subformer-source.md)",
}
# rows trained from scratch by fairseq-train (the others are lightcompress-compress runs)
SCRATCH = (
    "teacher_control",
    "lightformer_random",
    "subformer",
    "subformer_bert_init",
    "subformer_fairseq_init",
)
# Subformer's shape here: the teacher's width, 6-6 sandwich (its Table 2 shape: first and last
# layer own, the middle shared), SAFE r = 64, shared tables
SUBFORMER_SHAPE = [
    "--arch",
    "subformer",
    "--encoder-layers",
    "6",
    "--decoder-layers",
    "6",
    "--encoder-embed-dim",
    "256",
    "--decoder-embed-dim",
    "256",
    "--encoder-ffn-embed-dim",
    "1024",
    "--decoder-ffn-embed-dim",
    "1024",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--subformer-sharing",
    "sandwich",
    "--safe-dim",
    "64",
    "--share-all-embeddings",
]
# ... trained as its paper trains it (the diagnostic rows; examples/translation/subformer/
# common.sh: Adam (0.9, 0.999) eps 1e-6, lr 5e-4, inverse_sqrt, weight decay 0.01, dropout 0.2,
# label smoothing 0.1; warm-up a tenth of the budget, 700 of 7,000 updates of 4,096 tokens: the
# paper's was 10K of up to 250K updates of 128K tokens, a schedule a CPU budget cannot follow)
SUBFORMER_PAPER = [
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9, 0.999)",
    "--adam-eps",
    "1e-06",
    "--lr",
    "5e-4",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-init-lr",
    "1e-07",
    "--weight-decay",
    "0.01",
    "--dropout",
    "0.2",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
]
# the budget of the rows from the teacher (the subformer row's is the teacher's own recipe)
COMMON_BUDGET = {"max_update": 7000, "validate_every": 500, "patience": 4}
# rows that the first run (converged/*.json) stopped at 7,000 updates while they still improved,
# and the control compared with two of them: trained until early stopping (the same patience,
# a cap of 20,000), their schedules still set for 7,000 updates (the same warm-up as every
# other row: up to update 7,000 such a run is the 7,000-update run)
UNTIL_EARLY_STOP = {**COMMON_BUDGET, "max_update": 20000, "schedule_updates": 7000}
EXTENDED = ("teacher_control", "lightformer_keep_depth", "lightformer_random", "hypoformer_kd")
# rows made from another row's result: the default student's command and KD data, its size;
# the searched Smartformer's ranks
NEEDS = {
    "lightformer_random": "default",
    "teacher_control": "default",
    "dawid": "default",
    "smartformer": "smartformer_search",
}
SEARCH_RANKS = (32, 64, 128)  # the agent's choices (around the natural rank d / 4 = 64)


class PlanError(Exception):
    """Bad input or a missing prerequisite: one line, exit status 2."""


class StepError(Exception):
    """A step failed: one line (and where its log is), exit status 1."""


def _json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise PlanError(f"{path}: cannot read JSON ({exc})") from None


def _write_json(path: str, doc) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# -- paths in the committed JSON: the checkout relative, this machine's folders as placeholders
PLACEHOLDERS = {"DATA": "the results corpus (--data-dir)", "SAVE": "the rows' state (--save-root)"}
_REPO_DIRS = ("lightcompress", "runtime", "examples", "scripts", "tests", "docs", "lab")


def portable(value, roots):
    """``value`` (a string, or a list / dict of them, nested) with this machine's folders
    replaced: each ``(folder, name)`` of ``roots`` (longest folder first) where it is a path or
    begins one; ``name`` "" drops the folder (the checkout: paths relative to it; the
    interpreter's bin: commands by name). Other text is kept."""
    import re

    if isinstance(value, dict):
        return {k: portable(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, roots) for v in value]
    if not isinstance(value, str):
        return value
    for folder, name in sorted(roots, key=lambda kv: -len(kv[0])):
        folder = folder.rstrip("/")
        if not folder:
            continue
        pat = re.compile(r"(?<![\w./-])" + re.escape(folder) + r"(/|(?=[\s'\",:=)]|$))")
        value = pat.sub(
            lambda m, n=name: (n + "/" if n else "") if m.group(1) else (n or "."), value
        )
    return value


def checkouts_in(value) -> set[str]:
    """The checkouts a record's commands name (each ``--user-dir``'s parent)."""
    import re

    text = json.dumps(value)
    return {
        m.group(1) for m in re.finditer(r"--user-dir (/[^\s'\"]+?)/lightcompress(?=[\s'\"])", text)
    }


def teacher_recipe(path: str) -> tuple[list[str], dict]:
    """The shipped teacher's own training recipe, read from its checkpoint's fairseq
    configuration: (its fairseq-train flags: batch of tokens, optimizer, learning-rate schedule,
    dropout, label smoothing, patience, update cap, seed; the budget they make: validation
    every epoch or every N updates, as the teacher validated)."""
    from lightcompress.checkpoint import CheckpointError, read_checkpoint

    try:
        cfg = read_checkpoint(path).get("cfg")
    except CheckpointError as exc:
        raise PlanError(str(exc)) from None
    if not cfg:
        raise PlanError(f"{path}: no fairseq configuration to read the teacher's recipe from")

    def get(section, key):
        sec = cfg[section]
        return sec[key] if isinstance(sec, dict) else getattr(sec, key)

    opt, sched = get("optimizer", "_name"), get("lr_scheduler", "_name")
    if (
        opt != "adam"
        or sched != "inverse_sqrt"
        or get("criterion", "_name") != ("label_smoothed_cross_entropy")
    ):
        raise PlanError(
            f"{path}: the teacher trained with {opt} / {sched} / "
            f"{get('criterion', '_name')}; the plan reads adam / inverse_sqrt / "
            "label_smoothed_cross_entropy recipes only"
        )
    every = get("dataset", "validate_interval_updates") or 0
    flags = [
        "--max-tokens",
        str(get("dataset", "max_tokens")),
        "--update-freq",
        str(get("optimization", "update_freq")[0]),
        "--optimizer",
        "adam",
        "--adam-betas",
        str(get("optimizer", "adam_betas")),
        "--adam-eps",
        f"{get('optimizer', 'adam_eps'):g}",
        "--weight-decay",
        f"{get('optimizer', 'weight_decay'):g}",
        "--clip-norm",
        f"{get('optimization', 'clip_norm'):g}",
        "--lr",
        f"{get('optimization', 'lr')[0]:g}",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        str(get("lr_scheduler", "warmup_updates")),
        "--warmup-init-lr",
        f"{get('lr_scheduler', 'warmup_init_lr'):g}",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        f"{get('criterion', 'label_smoothing'):g}",
        "--dropout",
        f"{get('model', 'dropout'):g}",
        "--attention-dropout",
        f"{get('model', 'attention_dropout') or 0:g}",
        "--seed",
        str(get("common", "seed")),
    ]
    budget = {
        "max_update": get("optimization", "max_update"),
        "validate_every": every or "epoch",
        "patience": get("checkpoint", "patience"),
        "max_tokens": get("dataset", "max_tokens"),
    }
    return flags, budget


class Plan:
    """Paths, budget and the command of every row."""

    def __init__(self, opts):
        self.o = opts
        self.bin = os.path.join(opts.data_dir, "bin")
        self.ref = os.path.join(opts.data_dir, "raw", "test.en")
        self.teacher = os.path.join(TEACHER_DIR, "checkpoint.pt")
        self.spm = os.path.join(TEACHER_DIR, "spm.model")
        self.py = sys.executable
        self.env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p
            ),
            PYTHON=sys.executable,
        )  # (scripts/*.sh run this interpreter)
        if opts.threads:
            self.env.update(OMP_NUM_THREADS=str(opts.threads), MKL_NUM_THREADS=str(opts.threads))
        self._recipe = None

    def save(self, row: str) -> str:
        return os.path.join(self.o.save_root, row)

    # -- this machine's paths and the records' placeholders --------------------------------------
    def roots(self, *extra: tuple[str, str]) -> list[tuple[str, str]]:
        """The folders a record names by placeholder or relative path: the interpreter's bin
        (commands by name), DATA, SAVE, the checkout (and ``extra``)."""
        return [
            (os.path.dirname(self.py), ""),
            (os.path.abspath(self.o.data_dir), "DATA"),
            (os.path.abspath(self.o.save_root), "SAVE"),
            (REPO_ROOT, ""),
            *extra,
        ]

    def portable(self, value, *extra: tuple[str, str]):
        """``value`` as the committed JSON holds it (:func:`portable` with :meth:`roots`, and
        any other checkout its commands name)."""
        others = [(c, "") for c in checkouts_in(value)]
        return portable(value, self.roots(*extra, *others))

    def local(self, path: str) -> str:
        """A recorded path on this machine: DATA and SAVE are this plan's folders, a path
        relative to the checkout is this checkout's; anything else as it is."""
        for name, folder in (("DATA", self.o.data_dir), ("SAVE", self.o.save_root)):
            if path == name or path.startswith(name + "/"):
                return os.path.join(os.path.abspath(folder), path[len(name) + 1 :]).rstrip("/")
        if not os.path.isabs(path) and path.split("/")[0] in _REPO_DIRS:
            return os.path.join(REPO_ROOT, path)
        return path

    def recipe(self) -> tuple[list[str], dict]:
        """The shipped teacher's training recipe (:func:`teacher_recipe`), read once."""
        if self._recipe is None:
            self._recipe = teacher_recipe(self.teacher)
        return self._recipe

    def budget(self, row: str) -> dict:
        """``row``'s budget: the teacher's own (the subformer row) or the common one (every
        other row), each value given on the command line instead."""
        o = self.o
        if row == "subformer":
            b = dict(self.recipe()[1])
        else:
            b = dict(UNTIL_EARLY_STOP if row in EXTENDED else COMMON_BUDGET)
        for key in ("max_update", "validate_every", "patience"):
            if getattr(o, key) is not None:
                b[key] = getattr(o, key)
        if o.schedule_updates:  # (schedules set for another budget: a continued run's first)
            b["schedule_updates"] = o.schedule_updates
        if o.continue_from:
            b["continued_from"] = {
                "checkpoint": os.path.abspath(o.continue_from),
                "updates": _checkpoint_updates(o.continue_from),
            }
            # the earlier run's own commands (its compress plan.json, SAVE/student/../plan.json)
            first = os.path.join(
                os.path.dirname(os.path.dirname(os.path.abspath(o.continue_from))), "plan.json"
            )
            if os.path.exists(first):
                b["continued_from"]["commands"] = _json(first).get("commands")
        return b

    def check(self, dry: bool) -> None:
        for path, what in ((self.teacher, "the shipped teacher"), (self.spm, "its spm model")):
            if not os.path.isfile(path):
                raise PlanError(
                    f"{path}: {what} is missing (examples/translation/results/teacher/)"
                )
        if dry:
            return
        for path, what in (
            (os.path.join(self.bin, "dict.de.txt"), "the data-bin"),
            (self.ref, "the raw test references"),
        ):
            if not os.path.isfile(path):
                raise PlanError(
                    f"{path}: {what} is missing: build the corpus with python "
                    "examples/translation/l10n_corpus.py --permissive-only --out "
                    f"{self.o.data_dir}"
                )

    # -- commands -----------------------------------------------------------------------------
    def compress(self, row: str, extra: list[str], train: list[str] = ()) -> list[str]:
        o, b = self.o, self.budget(row)
        cmd = [
            self.py,
            "-m",
            "lightcompress.compress",
            self.teacher,
            "--data",
            self.bin,
            "--save-dir",
            self.save(row),
            "--spm",
            self.spm,
            "--ref",
            self.ref,
            *extra,
            "--max-update",
            str(b["max_update"]),
            "--validate-every",
            str(b["validate_every"]),
        ]
        if o.cpu:
            cmd.append("--cpu")
        cmd += ["--patience", str(b["patience"])]
        if b.get("schedule_updates"):
            cmd += ["--schedule-updates", str(b["schedule_updates"])]
        if o.continue_from:
            cmd += ["--continue-from", os.path.abspath(o.continue_from)]
        return cmd + (["--", *train] if train else [])

    def compress_args(self, row: str) -> tuple[list[str], list[str]]:
        """(compress options, extra fairseq-train flags) of a compress row."""
        if row == "default":
            return [], []
        if row == "lightformer_keep_depth":
            return ["--keep-depth"], []
        if row == "hypoformer_kd":
            return ["--method", "hypoformer", "--kd"], []
        if row == "hypoformer":
            return ["--method", "hypoformer", "--no-kd"], []
        if row == "smartformer_search":
            return [
                "--method",
                "smartformer",
                "--search-ranks",
                ",".join(map(str, SEARCH_RANKS)),
            ], []
        if row == "smartformer":
            return ["--method", "smartformer", "--rank", str(self.matched_rank())], []
        if row == "dawid":
            return ["--method", "dawid", "--params", str(self.dawid_params())], []
        raise KeyError(row)

    def dawid_params(self) -> int | str:
        """DA-WID keeps the teacher's embeddings and prunes the rest, so it cannot reach the
        default student's total (whose embedding is factorized too): its row gets the
        default student's non-embedding parameters on top of the teacher's embeddings."""
        from lightcompress.measure.params import checkpoint_report

        rec = os.path.join(self.o.rows_dir, "default.json")
        doc = _json(rec) if os.path.exists(rec) else {}
        ckpt = self.local(doc["checkpoint"]) if doc.get("checkpoint") else None
        if ckpt and os.path.exists(ckpt):
            return (
                checkpoint_report(self.teacher)["embedding"]
                + checkpoint_report(ckpt)["non_embedding"]
            )
        convert = [c for c in doc.get("commands", []) if "lightcompress-convert" in c]
        if len(convert) != 1:
            return "<the teacher's embedding + the default student's non-embedding parameters>"
        # the default row ran on another machine: its student's shape is the one its recorded
        # lightcompress-convert command builds from the teacher (the same parameters as the
        # trained student's), so build it again and count that
        import tempfile

        with tempfile.TemporaryDirectory(prefix="converged-default-shape-") as tmp:
            cmd = shlex.split(convert[0])
            cmd[0:1] = [self.py, "-c", "from lightcompress.convert.cli import cli_main; cli_main()"]
            for flag, value in (("-i", self.teacher), ("-o", os.path.join(tmp, "student.pt"))):
                if flag not in cmd:
                    raise StepError(f"{rec}: its lightcompress-convert command has no {flag}")
                cmd[cmd.index(flag) + 1] = value
            out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise StepError(
                    "rebuilding the default row's student shape failed: "
                    f"{out.stderr.strip()[-300:]}"
                )
            return (
                checkpoint_report(self.teacher)["embedding"]
                + checkpoint_report(cmd[cmd.index("-o") + 1])["non_embedding"]
            )

    def matched_rank(self) -> int | str:
        """The fixed CP rank with the searched model's size: each Q/K/V map costs R (d + h +
        d_k), an encoder layer has one attention and a decoder layer two, so the weighted mean."""
        log = os.path.join(self.save("smartformer_search"), "student", "rank_search.jsonl")
        if not os.path.exists(log):
            return "<the searched model's mean rank>"
        with open(log, encoding="utf-8") as f:
            recs = [json.loads(line) for line in f if line.strip()]
        if not recs:
            raise StepError(f"{log}: the rank search logged no decision")
        ranks = recs[-1]["ranks"]
        weight = {"encoder": 1, "decoder": 2}
        num = sum(weight[k.split(".")[0]] * r for k, r in ranks.items())
        den = sum(weight[k.split(".")[0]] for k in ranks)
        return max(1, round(num / den))

    def _default_commands(self, dry: bool) -> list[list[str]] | None:
        """The default row's recorded commands (its JSON), or None where it has none yet."""
        rec = os.path.join(self.o.rows_dir, "default.json")
        if not os.path.exists(rec):
            return None
        return [shlex.split(c) for c in _json(rec).get("commands", [])]

    def default_train(self, dry: bool = False, row: str = "lightformer_random") -> list[str]:
        """The default row's own fairseq-train command (as its JSON records it), without
        ``--finetune-from-model`` (random initialisation), saving to ``row``'s directory with
        ``row``'s budget and run with this checkout's plugin and this machine's paths: the same
        data, KD data and recipe."""
        cmds = self._default_commands(dry)
        if cmds is not None:
            lines = [c for c in cmds if any(a.endswith("fairseq-train") for a in c[:1])]
            if len(lines) != 1:
                raise StepError(
                    f"{self.o.rows_dir}/default.json records no single fairseq-train command"
                )
            cmd = [self.local(a) for a in lines[0]]
        elif dry:  # (the plan's listing before the default row ran: the command it will run)
            cmd = self._default_train_planned()
        else:
            raise StepError("the default row has no JSON yet")
        if "--finetune-from-model" in cmd:
            i = cmd.index("--finetune-from-model")
            del cmd[i : i + 2]
        cmd = [a for a in cmd if a != "--cpu"] + (["--cpu"] if self.o.cpu else [])
        cmd[0] = os.path.join(os.path.dirname(self.py), "fairseq-train")
        b = self.budget(row)
        every = str(b["validate_every"])
        for flag, value in (
            ("--user-dir", os.path.join(REPO_ROOT, "lightcompress")),
            ("--save-dir", os.path.join(self.save(row), "student")),
            ("--max-update", str(b["max_update"])),
            ("--patience", str(b["patience"])),
            ("--validate-interval-updates", every),
            ("--save-interval-updates", every),
        ):
            if flag in cmd:
                cmd[cmd.index(flag) + 1] = value
            elif flag == "--patience":
                cmd += [flag, value]
        return cmd

    def kd_command(self, dry: bool = False) -> list[str] | None:
        """The default row's recorded KD-data command (scripts/distill_data.sh: the teacher's
        beam translation of the training set) on this machine, or None where it made none."""
        cmds = self._default_commands(dry) or []
        kd = [c for c in cmds if any(a.endswith("distill_data.sh") for a in c[:2])]
        if not kd:
            return None
        cmd = [self.local(a) for a in kd[0]]
        return [a for a in cmd if a != "--cpu"] + (["--cpu"] if self.o.cpu else [])

    def control_train(self, dry: bool = False) -> list[str]:
        """The control row: the default row's fairseq-train command (:meth:`default_train`:
        the students' data, KD data, schedule and budget) with the teacher's architecture in
        place of the student's (``--arch`` and the shape flags from the shipped checkpoint's
        configuration, the student's own ``--lc-*`` flags dropped), fine-tuned from the shipped
        teacher."""
        from lightcompress.checkpoint import read_checkpoint

        try:
            cmd = self.default_train(dry, row="teacher_control")
        except StepError:
            if not dry:
                raise
            return [
                "fairseq-train",
                (
                    "<the default row's command with the teacher's "
                    "architecture, from teacher/checkpoint.pt>"
                ),
            ]
        model = read_checkpoint(self.teacher)["cfg"]["model"]
        get = (lambda k: model[k]) if isinstance(model, dict) else (lambda k: getattr(model, k))
        out, i = [], 0
        while i < len(cmd):
            if cmd[i].startswith("--lc-"):  # (a LightFormer flag and its value)
                i += 1 if i + 1 < len(cmd) and cmd[i + 1].startswith("--") else 2
                continue
            out.append(cmd[i])
            i += 1
        shape = {"--arch": get("arch")}
        for side in ("encoder", "decoder"):
            for flag, key in (
                ("layers", "layers"),
                ("embed-dim", "embed_dim"),
                ("ffn-embed-dim", "ffn_embed_dim"),
                ("attention-heads", "attention_heads"),
            ):
                shape[f"--{side}-{flag}"] = str(get(f"{side}_{key}"))
        for flag, value in shape.items():
            if flag in out:
                out[out.index(flag) + 1] = value
            else:
                out += [flag, value]
        if get("encoder_normalize_before") or get("decoder_normalize_before"):
            out += ["--encoder-normalize-before", "--decoder-normalize-before"]
        return out + ["--finetune-from-model", self.teacher]

    def _default_train_planned(self) -> list[str]:
        """The fairseq-train command the default row will run (compress --dry-run into a
        directory that does not exist, so no earlier run's settings interfere; its paths are
        then the default row's)."""
        import tempfile

        nowhere = os.path.join(tempfile.gettempdir(), f"converged-dry-run-{os.getpid()}")
        cmd = self.compress("default", ["--dry-run"])
        cmd[cmd.index("--save-dir") + 1] = nowhere
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise StepError(
                f"compress --dry-run of the default row failed: {out.stderr.strip()[-300:]}"
            )
        lines = [
            ln[2:]
            for ln in out.stdout.splitlines()
            if ln.startswith("+ ") and "fairseq-train" in ln
        ]
        if len(lines) != 1:
            raise StepError("compress --dry-run printed no single fairseq-train command")
        return [a.replace(nowhere, self.save("default")) for a in shlex.split(lines[0])]

    def scratch_train(self, row: str, dry: bool = False) -> list[str]:
        if row == "lightformer_random":
            return self.default_train(dry)
        if row == "teacher_control":
            return self.control_train(dry)
        b = self.budget(row)
        cmd = [
            os.path.join(os.path.dirname(self.py), "fairseq-train"),
            self.bin,
            "--user-dir",
            os.path.join(REPO_ROOT, "lightcompress"),
            "--task",
            "translation",
            "-s",
            "de",
            "-t",
            "en",
            *SUBFORMER_SHAPE,
        ]
        if row == "subformer":  # the teacher's own recipe, the plugin's default initialisation
            cmd += self.recipe()[0]
        else:  # the diagnostic rows: the paper's schedule, each initialisation named
            cmd += [
                *SUBFORMER_PAPER,
                "--warmup-updates",
                str(max(1, b["max_update"] // 10)),
                "--max-tokens",
                "4096",
                "--seed",
                "1",
                "--subformer-init",
                "bert" if row == "subformer_bert_init" else "fairseq",
            ]
        cmd += ["--max-update", str(b["max_update"]), "--patience", str(b["patience"])]
        if b["validate_every"] != "epoch":
            every = str(b["validate_every"])
            cmd += [
                "--validate-interval-updates",
                every,
                "--save-interval-updates",
                every,
                "--keep-interval-updates",
                "1",
            ]
        cmd += [
            "--no-epoch-checkpoints",
            "--save-dir",
            os.path.join(self.save(row), "student"),
            "--no-progress-bar",
            "--log-format",
            "simple",
            "--log-interval",
            "50",
            "--num-workers",
            "0",
        ]
        return cmd + (["--cpu"] if self.o.cpu else [])

    def generate(self, row: str) -> list[str]:
        return [
            os.path.join(os.path.dirname(self.py), "fairseq-generate"),
            self.bin,
            "--user-dir",
            os.path.join(REPO_ROOT, "lightcompress"),
            "--path",
            os.path.join(self.save(row), "student", "checkpoint_best.pt"),
            "--task",
            "translation",
            "-s",
            "de",
            "-t",
            "en",
            "--gen-subset",
            "test",
            "--beam",
            "5",
            "--max-len-a",
            "1.2",
            "--max-len-b",
            "10",
            "--batch-size",
            "64",
            "--required-batch-size-multiple",
            "1",
            "--num-workers",
            "0",
            "--post-process",
            "sentencepiece",
        ] + (["--cpu"] if self.o.cpu else [])

    def commands(self, row: str, dry: bool = True) -> list[list[str]]:
        """``row``'s commands; ``dry`` (the plan's listing): a command made from a row not
        finished yet is shown as a placeholder (a run raises the reason instead). A training
        from scratch that reads the default row's KD data starts with the default row's own
        KD-data command (made here when this machine lacks that data)."""
        if row in SCRATCH:
            try:
                train = self.scratch_train(row, dry)
            except (StepError, PlanError):
                if not dry:
                    raise
                train = [
                    "fairseq-train",
                    "<the default row's command without --finetune-from-model>",
                ]
            kd = self.kd_command(dry) if "--kd-distilled-data" in train else None
            if kd is None and "--kd-distilled-data" in train and not dry:
                data = train[train.index("--kd-distilled-data") + 1]
                if not os.path.isdir(data):
                    raise PlanError(
                        f"{data}: the default row's KD data (its fairseq-train "
                        "command reads it) is missing and its JSON records no "
                        "command that makes it: run the default row here"
                    )
            return [*([kd] if kd else []), train, self.generate(row)]
        extra, train = self.compress_args(row)
        return [self.compress(row, [str(a) for a in extra], train)]

    def checkpoint(self, row: str) -> str:
        """The row's model as it ships (DA-WID: the fused one)."""
        if row == "dawid":
            return os.path.join(self.save(row), "student.pt")
        return os.path.join(self.save(row), "student", "checkpoint_best.pt")

    # -- running ------------------------------------------------------------------------------
    def run_cmd(self, cmd: list[str], log: str, stdout: str | None = None) -> None:
        os.makedirs(os.path.dirname(log), exist_ok=True)
        print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
        with open(log, "a", encoding="utf-8") as lf:
            out = open(stdout + ".tmp", "w", encoding="utf-8") if stdout else lf  # noqa: SIM115
            try:
                rc = subprocess.run(
                    cmd, env=self.env, stdout=out, stderr=lf, check=False
                ).returncode
            finally:
                if stdout:
                    out.close()
        if rc != 0:
            raise StepError(
                f"{cmd[0] if '/' not in cmd[0] else os.path.basename(cmd[0])} failed "
                f"(exit {rc}): see {log}"
            )
        if stdout:
            os.replace(stdout + ".tmp", stdout)

    def record(self, row: str, save: str) -> dict:
        """``row``'s JSON from a finished compress run in ``save`` made elsewhere (its own
        commands, from its plan.json, are what the row records)."""
        if row in SCRATCH:
            raise PlanError(f"{row} is not a compress row: `converged.py run {row}` trains it")
        out = os.path.join(self.o.rows_dir, f"{row}.json")
        if os.path.exists(out):
            raise PlanError(f"{out} exists: delete it first to record {row} again")
        rec = compress_record(save, row)
        cmds = _json(os.path.join(save, "plan.json"))["commands"]
        ckpt = _json(os.path.join(save, "plan.json"))["student"]["checkpoint"]
        finished = datetime.datetime.fromtimestamp(
            os.path.getmtime(os.path.join(save, "report.json")), datetime.UTC
        )
        if rec.get("kd") is None:  # (a plan.json from before compress recorded it)
            rec["kd"] = any("translation_seqkd" in c for c in cmds)
        # the code that ran: the checkout whose plugin the run's fairseq-train imported
        train = next((shlex.split(c) for c in cmds if "fairseq-train" in c), [])
        user_dir = train[train.index("--user-dir") + 1] if "--user-dir" in train else REPO_ROOT
        rec.update(
            row=row,
            what=WHAT[row],
            checkpoint=ckpt,
            commands=cmds,
            budget=self.budget(row),
            machine=machine(),
            code=code_commit(os.path.dirname(user_dir)),
            started=None,
            finished=finished.isoformat(timespec="seconds"),
        )
        rec = self.portable(rec, (os.path.abspath(save), f"SAVE/{row}"))
        _write_json(out, rec)
        return rec

    def record_int8(self, row: str, save: str) -> dict:
        """Add to ``row``'s JSON the int8 export's figures and the float32 export's size of a
        later compress run of the same student (``save``: its report.json; the student
        checkpoint must be the same bytes): the exports of the current code."""
        import hashlib

        out = os.path.join(self.o.rows_dir, f"{row}.json")
        if not os.path.exists(out):
            raise PlanError(f"{out}: no such row; record or run it first")
        rec = _json(out)
        plan = _json(os.path.join(save, "plan.json"))

        def digest(path):
            with open(path, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()

        if digest(plan["student"]["checkpoint"]) != digest(self.local(rec["checkpoint"])):
            raise PlanError(f"{save} holds another student than {row}'s {rec['checkpoint']}")
        report = _json(os.path.join(save, "report.json"))
        q = _int8_of(report)
        if not q:
            raise PlanError(f"{save}/report.json has no int8 figures (compress --int8)")
        measured = datetime.datetime.fromtimestamp(
            os.path.getmtime(os.path.join(save, "report.json")), datetime.UTC
        ).isoformat(timespec="seconds")
        q["int8"].update(
            commands=self.portable(plan["commands"], (os.path.abspath(save), f"SAVE/{row}-int8")),
            code=code_commit(),
            measured=measured,
        )
        rec.update(q)
        size = report["models"]["student"].get("onnx_size_bytes")
        if size and size != rec.get("onnx_size_bytes"):  # (the float32 export of this code)
            rec.update(
                onnx_size_bytes=size,
                onnx_export={
                    "code": code_commit(),
                    "measured": measured,
                    "was_bytes": rec.get("onnx_size_bytes"),
                },
            )
        _write_json(out, rec)
        return rec

    def make_kd(self, cmd: list[str], poll: float = 60.0) -> bool:
        """Make the KD data ``cmd`` (the default row's recorded distill_data.sh command)
        writes, unless it is there (``OUT-DIR.done``, compress's own mark of a finished KD
        step, which this writes too). While another process holds the default row's folder
        (its compress run makes the same data there), wait for that data, every ``poll``
        seconds."""
        import time

        kd = cmd[cmd.index("--out-dir") + 1]
        mark, said = kd.rstrip("/") + ".done", False
        while not os.path.exists(mark):
            with _RowLock(self.save("default"), "default") as lock:
                if lock.held:
                    self.run_cmd(cmd, os.path.join(self.save("default"), "kd-data.log"))
                    with open(mark, "w", encoding="utf-8") as f:
                        f.write(time.strftime("%Y-%m-%d %H:%M:%S\n"))
                    break
            if not said:
                print(
                    f"[converged] {kd}: another process holds the default row's folder "
                    "(its compress run makes this KD data): waiting for it",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            time.sleep(poll)
        return True

    def off_budget(self, rec: dict) -> str | None:
        """How a finished row's recorded budget differs from the plan's for it, or None."""
        want, got = self.budget(rec["row"]), rec.get("budget") or {}
        keys = ("max_update", "validate_every", "patience", "max_tokens")
        if all(got.get(k) == want.get(k) for k in keys):
            return None
        return f"{_budget_text({'budget': got})}, the plan's {_budget_text({'budget': want})}"

    def run_row(self, row: str) -> dict:
        """Train and score ``row`` (each step skipped when done) and write its JSON; a row
        finished before is kept (``--again``: trained again, its JSON replaced at the end)."""
        out = os.path.join(self.o.rows_dir, f"{row}.json")
        if os.path.exists(out) and not self.o.again:
            rec = _json(out)
            off = self.off_budget(rec)
            print(
                f"[converged] {row}: done before ({out})"
                + (
                    f"; at another budget than the plan's ({off}): `run {row} --again` trains "
                    f"it at the plan's, going on from {self.save(row)} where that holds a run "
                    "at the plan's (one of another budget is refused: move it aside first)"
                    if off
                    else ""
                ),
                file=sys.stderr,
            )
            return rec
        need = NEEDS.get(row)
        if need and not os.path.exists(os.path.join(self.o.rows_dir, f"{need}.json")):
            with _RowLock(self.save(need), need) as other:
                if not other.held:
                    print(
                        f"[converged] {row}: made from {need}, which another process is "
                        "training; skipped (run it again afterwards)",
                        file=sys.stderr,
                        flush=True,
                    )
                    return None
            raise PlanError(f"{row} is made from the {need} row's result: run that row first")
        save = self.save(row)
        os.makedirs(save, exist_ok=True)
        with _RowLock(save, row) as lock:
            if not lock.held:
                print(
                    f"[converged] {row}: another process is training it ({lock.path}); skipped",
                    file=sys.stderr,
                    flush=True,
                )
                return None
            if os.path.exists(out) and not self.o.again:  # finished by that other process
                print(f"[converged] {row}: done before ({out})", file=sys.stderr)
                return _json(out)
            return self._run_row(row, save, out)

    def own_state(self, row: str, save: str, train: list[str]) -> None:
        """Refuse a state directory that holds another training than ``row``'s fairseq-train
        command ``train``: fairseq-train would go on from its checkpoint, another model's
        weights under this row's name. The command (portable, its budget's flags aside: a row
        may go on with more budget) is kept in SAVE/ROW/train.cmd when the training starts."""
        path = os.path.join(save, "train.cmd")
        want = shlex.join(_without_budget(self.portable(train)))
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                have = f.read().strip()
            if have != want:
                raise PlanError(
                    f"{save} holds another training than {row}'s (its {os.path.basename(path)} "
                    "is not the plan's command, budget aside): move it aside to train "
                    f"{row} here"
                )
            return
        student = os.path.join(save, "student")
        if os.path.isdir(student) and any(f.endswith(".pt") for f in os.listdir(student)):
            raise PlanError(
                f"{student} holds checkpoints of a training whose command was not recorded "
                f"({path} is missing): move {save} aside to train {row} here"
            )
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(want + "\n")
        os.replace(path + ".tmp", path)

    def _run_row(self, row: str, save: str, out: str) -> dict:
        started = datetime.datetime.now(datetime.UTC)
        print(f"[converged] {row}: {WHAT[row]} ({save})", file=sys.stderr, flush=True)
        cmds = self.commands(row, dry=False)
        if row in SCRATCH:  # (the KD data,) a training from fairseq-train, the test translation
            for kd in cmds[:-2]:
                self.make_kd(kd)
            done = os.path.join(save, "student", "train.done")
            if not os.path.exists(done):
                self.own_state(row, save, cmds[-2])
                self.run_cmd(cmds[-2], os.path.join(save, "train.log"))
                with open(done, "w", encoding="utf-8") as f:
                    f.write("fairseq-train ended\n")
            gen = os.path.join(save, "generate-test.txt")
            if not os.path.exists(gen):
                self.run_cmd(cmds[-1], os.path.join(save, "generate.log"), stdout=gen)
            rec = scratch_record(save, row, self.ref)
        else:
            self.run_cmd(cmds[0], os.path.join(save, "compress.log"))
            rec = compress_record(save, row, self.o.threads if self.o.cpu else None)
        rec.update(
            row=row,
            what=WHAT[row],
            checkpoint=self.checkpoint(row),
            commands=[shlex.join(c) for c in cmds],
            budget=self.budget(row),
            machine=machine(),
            code=code_commit(),
            started=started.isoformat(timespec="seconds"),
            finished=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )
        rec = self.portable(rec)
        _write_json(out, rec)
        print(
            f"[converged] {row}: BLEU {rec['bleu']} chrF {rec['chrf']}, {rec['params']:,} "
            f"parameters -> {out}",
            file=sys.stderr,
            flush=True,
        )
        return rec


class _RowLock:
    """An exclusive lock on one row's state (``SAVE/row.lock``, flock): two ``run`` commands
    (e.g. one per CPU core, each given its own rows) never train the same row at once. The
    lock goes with its process, so a killed run leaves nothing to clean up."""

    def __init__(self, save: str, row: str):
        os.makedirs(save, exist_ok=True)
        self.path = os.path.join(save, "row.lock")
        self.held = False
        self._f = None

    def __enter__(self):
        import fcntl

        self._f = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self
        self.held = True
        self._f.seek(0)
        self._f.truncate()
        self._f.write(f"{os.getpid()}\n")
        self._f.flush()
        return self

    def __exit__(self, *exc):
        self._f.close()  # releases the lock
        return False


def status(plan: Plan) -> list[str]:
    """One line per row: finished (its BLEU; and a run training it again now, e.g. ``run
    --again`` at the plan's budget), training now (another process holds its lock), stopped
    part-way, or not started; with the updates, the best validation loss so far and, where
    training, the hours left to the budget at the log's median speed."""
    lines = []
    for row in ROWS:
        out = os.path.join(plan.o.rows_dir, f"{row}.json")
        if os.path.exists(out):
            rec = _json(out)
            off = plan.off_budget(rec)
            again = _progress(plan, row, busy_only=True)
            lines.append(
                f"{row}: done, BLEU {rec.get('bleu')} ({rec.get('updates')} updates, "
                f"{rec.get('stopped') or 'stopped'})"
                + (f"; at another budget than the plan's: {off}" if off else "")
                + (f"; trained again: {again}" if again else "")
            )
            continue
        lines.append(f"{row}: {_progress(plan, row)}")
    return lines


def _progress(plan: Plan, row: str, busy_only: bool = False) -> str | None:
    """Where the training in the row's state directory is ("training now, N of at most CAP
    updates, ..."); ``busy_only``: None unless another process is training it now."""
    save = plan.save(row)
    logs = [fine_tune_log(save), os.path.join(save, "train.log")]
    log = next((p for p in logs if os.path.exists(p)), None)
    busy = False
    if os.path.exists(os.path.join(save, "row.lock")):
        with _RowLock(save, row) as lock:
            busy = not lock.held
    if busy_only and not busy:
        return None
    state = "training now" if busy else "stopped part-way" if log else "not started"
    if os.path.exists(os.path.join(save, "student", "train.done")):  # a scratch row
        state = "trained, " + ("translating the test set now" if busy else "not scored yet")
    if log is None:
        need = NEEDS.get(row)
        return state + (f" (made from {need})" if need else "")
    try:
        t = _training(log)
    except StepError:  # (no validation yet)
        return f"{state}, no validation yet"
    cap = plan.budget(row)["max_update"]
    text = (
        f"{state}, {t['updates']} of at most {cap} updates, best "
        f"validation loss {t['best_valid_loss']} at {t['best_update']}"
    )
    last_update, last_loss = t["valid_curve"][-1]
    if last_update != t["best_update"]:
        text += f", last {last_loss} at {last_update}"
    if _no_early_stop({"method": row.split("_")[0]}):  # (the row's method, as its JSON names it)
        text += (
            " (no early stop: its masks' schedule runs to the cap, the last checkpoint is fused)"
        )
    if t.get("ups_median") and t["updates"] is not None:
        left = max(0, cap - t["updates"]) / t["ups_median"] / 3600
        text += f"; at most {left:.1f} h left at {t['ups_median']:.2f} updates/s"
    return text


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = f"{names[0]} x{len(names)}" if names else cpu
    except OSError:
        pass
    gpu = os.environ.get("CONVERGED_GPU", "")
    return f"{cpu}{', ' + gpu if gpu else ''}"


def code_commit(repo: str = REPO_ROOT) -> str:
    r = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return r.stdout.strip() or "unknown"


def _training(log: str, before: tuple[str, int] | None = None, name: str = "") -> dict:
    """Updates, best update and validation loss, and the validation curve of a fairseq log.

    ``before``: (the log of the earlier run this one continued, the update it continued
    from): that run's lines up to that update count too, as a part of its own speed (a
    ``--continue-from`` row's updates, curve and hours are both runs'); ``name``: the
    continuation's part (where it ran)."""
    from plot_curves import LogError, parse_log

    if before is not None:
        import re
        import tempfile

        first, at = before
        with open(first, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines(keepends=True)
        keep = []
        for line in lines:  # (its lines past the checkpoint, if any, were not continued)
            m = re.search(r"num_updates[ =]+(\d+)", line)
            if m and int(m.group(1)) > at:
                break
            keep.append(line)
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        where = name or "this machine, continued (--continue-from)"
        mark = f"[converged] device: {where} from update {at}\n"
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False, encoding="utf-8") as tmp:
            tmp.write("".join(keep) + mark + text)
        try:
            return _training(tmp.name)
        finally:
            os.unlink(tmp.name)

    try:
        valid = parse_log(log)["valid"]
    except LogError as exc:
        raise StepError(str(exc)) from None
    if not valid:
        raise StepError(f"{log}: no validation")
    upd, loss = min(valid, key=lambda p: p[1])
    with open(log, encoding="utf-8", errors="replace") as f:
        text = f.read()
    import re

    ups = [int(u) for u in re.findall(r"num_updates[ =]+(\d+)", text)]
    stopped = (
        "early stop (patience)"
        if "early stop" in text
        else "max-update"
        if "done training" in text
        else None
    )
    out = {
        "updates": max(ups) if ups else None,
        "best_update": int(upd),
        "best_valid_loss": loss,
        "valid_curve": valid,
        "stopped": stopped,
    }
    # the training's speed on this machine: the median of fairseq's updates/s over the log
    # (a median, so that a run stopped and resumed, or paused, does not count its pauses)
    parts = _device_parts(text, out["updates"])
    if len(parts) > 1 and parts[0]["updates"] == 0 and parts[0]["ups_median"] is None:
        parts = parts[1:]  # (a row that started on another device: nothing here before it)
    if len(parts) == 1 and parts[0]["device"] != "this machine":
        if parts[0]["ups_median"]:
            out.update(devices=parts, train_hours=parts[0]["hours"])
        return out
    if len(parts) == 1:
        if parts[0]["ups_median"] and out["updates"]:
            median = parts[0]["ups_median"]
            out.update(ups_median=median, train_hours=round(out["updates"] / median / 3600, 2))
        return out
    # a row continued on another device: each part's updates at its own median speed
    if all(p["ups_median"] for p in parts):
        out.update(devices=parts, train_hours=round(sum(p["hours"] for p in parts), 2))
    return out


# a line the plan's log gets where a row's training went on on another device:
# "[converged] device: NAME from update N" (the fairseq lines after it are that device's)
DEVICE_MARK = r"^\[converged\] device: (.+?) from update (\d+)\s*$"


def _median_ups(text: str) -> float | None:
    """The median of fairseq's updates/s in ``text`` (train_inner lines; a run too short for
    one: fairseq's end-of-epoch train lines)."""
    import re

    inner = re.findall(r"train_inner .*?\bups=([0-9.]+)", text)
    rates = sorted(map(float, inner or re.findall(r"\| train \|.*?\| ups ([0-9.]+)", text)))
    return rates[len(rates) // 2] if rates and rates[len(rates) // 2] > 0 else None


def _device_parts(text: str, updates: int | None) -> list[dict]:
    """The log cut at its device lines: each part's device, updates, median speed and hours
    (one part, device "this machine", for a log without such lines)."""
    import re

    marks = list(re.finditer(DEVICE_MARK, text, re.MULTILINE))
    cuts = [(0, "this machine", 0)] + [(m.end(), m.group(1), int(m.group(2))) for m in marks]
    parts = []
    for i, (at, name, first) in enumerate(cuts):
        end_at = marks[i].start() if i < len(marks) else len(text)
        last = cuts[i + 1][2] if i + 1 < len(cuts) else (updates or 0)
        ups = _median_ups(text[at:end_at])
        n = max(0, last - first)
        parts.append(
            {
                "device": name,
                "from_update": first,
                "updates": n,
                "ups_median": ups,
                "hours": round(n / ups / 3600, 3) if ups else None,
            }
        )
    return parts


def fine_tune_log(save: str) -> str:
    """A compress run's fairseq-train log: ``logs/NN-fine-tune.log``, its step's number
    depending on the steps before it (03 after the KD data's step, 02 without KD)."""
    import glob

    found = sorted(glob.glob(os.path.join(glob.escape(save), "logs", "[0-9][0-9]-fine-tune.log")))
    return found[-1] if found else os.path.join(save, "logs", "03-fine-tune.log")


def compress_record(save: str, row: str, threads: int | None = None) -> dict:
    """``row``'s figures from its compress run in ``save`` (``threads``: the CPU threads it
    trained with, which names the part of a continued run)."""
    rep = _json(os.path.join(save, "report.json"))
    s, t = rep["models"]["student"], rep["models"]["teacher"]
    rec = {
        k: s.get(k)
        for k in (
            "params",
            "size_bytes",
            "onnx_size_bytes",
            "bleu",
            "bleu_signature",
            "chrf",
            "chrf_signature",
            "sentences",
        )
    }
    rec.update(
        method=rep["plan"]["method"],
        model=s.get("model"),
        choice=rep["plan"]["choice"],
        shape=rep["plan"]["student"].get("shape"),
        kd=rep["plan"]["student"].get("kd"),
        teacher={k: t.get(k) for k in ("params", "size_bytes", "bleu", "chrf")},
        **_training(
            fine_tune_log(save),
            _continued(rep["plan"]["commands"]),
            f"this machine, continued on {threads} CPU thread{'s' * (threads != 1)}"
            if threads
            else "",
        ),
    )
    if rec["method"] == "dawid" and rec.get("valid_curve"):
        # DA-WID fuses its last checkpoint (its masks' schedule runs to the end): that is the
        # row's update, not the lowest validation loss (the distillation-only start's)
        rec.update(best_update=rec["updates"], best_valid_loss=rec["valid_curve"][-1][1])
    rec.update(_int8_of(rep))
    return rec


def _continued(commands: list[str]) -> tuple[str, int] | None:
    """(the earlier run's fine-tune log, the update it continued from) of a compress run made
    with ``--continue-from`` (its fairseq-train's ``--continue-once``), or None."""
    train = next((shlex.split(c) for c in commands if "--continue-once" in c), None)
    if train is None:
        return None
    ckpt = train[train.index("--continue-once") + 1]
    log = fine_tune_log(os.path.dirname(os.path.dirname(ckpt)))
    if not os.path.exists(log):
        raise StepError(
            f"{log}: the log of the run this row continued (--continue-from {ckpt}) is missing"
        )
    return log, _checkpoint_updates(ckpt)


def _checkpoint_updates(path: str) -> int:
    """The updates a fairseq training checkpoint has trained."""
    from lightcompress.checkpoint import read_checkpoint

    return read_checkpoint(path)["optimizer_history"][-1].get("num_updates", 0)


def _int8_of(rep: dict) -> dict:
    """``{"int8": ...}``: the int8 export's figures of a compress report (its int8 step), or
    nothing where the report has none."""
    q = rep["models"]["student"].get("int8") or {}
    if q.get("bleu") is None:
        return {}
    return {"int8": {k: q.get(k) for k in ("precision", "bleu", "chrf", "onnx_size_bytes")}}


def scratch_record(save: str, row: str, ref: str) -> dict:
    import sacrebleu
    from collect import CollectError, read_generate, read_refs

    try:
        refs = read_refs(ref)
        hyps = read_generate(os.path.join(save, "generate-test.txt"))
    except CollectError as exc:
        raise StepError(str(exc)) from None
    if sorted(hyps) != list(range(len(refs))):
        raise StepError(
            f"{save}/generate-test.txt: {len(hyps)} translations for {len(refs)} references"
        )
    sys_out = [hyps[i] for i in range(len(refs))]
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(sys_out, [refs]), chrf.corpus_score(sys_out, [refs])
    ckpt = os.path.join(save, "student", "checkpoint_best.pt")
    params = _count_checkpoint(ckpt)
    return {
        "params": params,
        "size_bytes": os.path.getsize(ckpt),
        "onnx_size_bytes": None,
        "bleu": round(b.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": round(c.score, 2),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(refs),
        "method": row.split("_")[0],
        "model": None,
        "choice": None,
        "shape": None,
        "kd": "kd-bin" in open(os.path.join(save, "train.log"), encoding="utf-8").read(1 << 16),
        "teacher": None,
        **_training(os.path.join(save, "train.log")),
    }


def record_source_check(plan: Plan, row: str) -> dict:
    """Add source_check.py's figures (does the model read its source?) to a finished row's
    JSON: the pooled-encoder cosine of the first test sources, the bits a target token of them
    costs with its own source and with another sentence's and, for a row translated by
    fairseq-generate, its distinct test translations."""
    from source_check import CheckError, distinct_translations, measure

    out = os.path.join(plan.o.rows_dir, f"{row}.json")
    if row not in ROWS or not os.path.exists(out):
        raise PlanError(f"{row}: no finished row ({out})")
    rec = _json(out)
    try:
        check = measure(plan.checkpoint(row), plan.bin)
    except CheckError as exc:
        raise StepError(str(exc)) from None
    gen = os.path.join(plan.save(row), "generate-test.txt")
    if os.path.exists(gen):
        check["distinct_translations"], check["translations"] = distinct_translations(gen)
    rec["source_check"] = dict(check, code=code_commit())
    _write_json(out, rec)
    return rec


def training_source_check(plan: Plan, row: str) -> tuple[str, dict]:
    """source_check.py's figures of a row still training: its last checkpoint (path, figures);
    nothing is recorded (a row's JSON is written when it finishes)."""
    from source_check import CheckError, measure

    if row not in ROWS:
        raise PlanError(f"{row}: no such row")
    last = os.path.join(plan.save(row), "student", "checkpoint_last.pt")
    if not os.path.exists(last):
        raise PlanError(f"{row}: no finished row and no checkpoint of a training ({last})")
    try:
        return last, measure(last, plan.bin)
    except CheckError as exc:
        raise StepError(str(exc)) from None


def _source_checks(recs: list[dict]) -> list[str]:
    """One line: the rows measured by ``source-check``."""
    done = [r for r in recs if r.get("source_check")]
    if not done:
        return []

    def one(r):
        c = r["source_check"]
        text = f"{r['row']} {c['pooled_cosine']:.3f}"
        if "own_bits" in c:
            text += f", {c['other_bits'] - c['own_bits']:+.2f} bits"
        if c.get("translations"):
            text += (
                f" ({c['distinct_translations']:,} distinct of {c['translations']:,} translations)"
            )
        return text

    counts = sorted({r["source_check"]["sources"] for r in done})
    bits = any("own_bits" in r["source_check"] for r in done)
    return [
        "Does each model read its source (`converged.py source-check`: the mean cosine between the "
        f"mean-pooled encoder outputs of {' or '.join(map(str, counts))} test sources, 1.000 = the "
        "same vector for every source"
        + (
            "; and how many bits a target token of them costs more, teacher-forced, with another "
            "sentence's source than with its own, +0.00 = the source is not read"
            if bits
            else ""
        )
        + "): "
        + "; ".join(one(r) for r in done)
        + ".",
        "",
    ]


def _count_checkpoint(path: str) -> int:
    """Total parameters of a checkpoint's model (lightcompress.checkpoint's report)."""
    from lightcompress.measure.params import checkpoint_report

    return int(checkpoint_report(path)["total"])


# -- speed ------------------------------------------------------------------------------------
def _state_owner(recorded: str) -> str | None:
    """The plan's row whose state directory a recorded path (SAVE/ROW/...) lies in, or None."""
    parts = recorded.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "SAVE" and parts[1] in ROWS else None


def speed(plan: Plan, dry: bool) -> None:
    """The teacher and every finished row, one interleaved measure_speed run per batch size
    (1 and 32): fairseq, ONNX Runtime, CTranslate2 on the dense teacher, each with and without
    the shared shortlist (like for like), one thread, beam 5, test sentences at their natural
    lengths -> ROWS_DIR/speed.json. Finished rows whose checkpoints are not on this machine keep
    the earlier run that timed them (``merge_speed_runs``)."""
    o = plan.o
    rows = [r for r in ROWS if os.path.exists(os.path.join(o.rows_dir, f"{r}.json"))]
    if not rows and not dry:
        raise PlanError(f"{o.rows_dir}: no finished row to time (run `converged.py run` first)")
    recorded = {r: _json(os.path.join(o.rows_dir, f"{r}.json"))["checkpoint"] for r in rows}
    ckpt = {r: plan.local(path) for r, path in recorded.items()}
    spath = os.path.join(o.rows_dir, "speed.json")
    earlier = _json(spath) if os.path.exists(spath) else None
    # a row recorded in another row's state directory (subformer_bert_init ran as the old
    # "subformer" row, in SAVE/subformer): what is there now is that other row's model
    taken = {r: w for r, p in recorded.items() if (w := _state_owner(p)) not in (None, r)}
    if taken:
        print(
            "[converged] speed: "
            + ", ".join(
                f"{r} (recorded in the {w} row's state directory)" for r, w in taken.items()
            )
            + ": not timed again",
            file=sys.stderr,
            flush=True,
        )
        rows = [r for r in rows if r not in taken]
    elsewhere = [] if dry else [r for r in rows if not os.path.exists(ckpt[r])]
    if elsewhere:
        # rows trained on another machine (their checkpoints are not here): time the rest
        # against the teacher in a run of their own, kept beside the run that timed those
        timed = {lab for run in _speed_runs(earlier) for lab in run.get("batch_1", {})}
        lost = [r for r in elsewhere if r not in timed]
        print(
            f"[converged] speed: {', '.join(elsewhere)}: checkpoint not on this machine; "
            + (f"no earlier run timed {', '.join(lost)}" if lost else "their earlier run stays"),
            file=sys.stderr,
            flush=True,
        )
        rows = [r for r in rows if r not in elsewhere]
        if not rows:
            raise PlanError("no finished row's checkpoint is on this machine: nothing to time")
    paths = [f"teacher={plan.teacher}"] + [f"{r}={ckpt.get(r, '<its checkpoint>')}" for r in rows]
    shortlist = os.path.join(o.save_root, "shortlist.txt")
    bindir = os.path.dirname(plan.py)
    cmds = [
        [
            os.path.join(bindir, "lightcompress-shortlist"),
            "--data",
            plan.bin,
            "-s",
            "de",
            "-t",
            "en",
            "-o",
            shortlist,
        ]
    ]
    outs = {}
    for batch, n in ((1, o.speed_sentences), (32, max(64, o.speed_sentences))):
        outs[batch] = os.path.join(o.save_root, f"speed-b{batch}.json")
        cmds.append(
            [
                "bash",
                os.path.join(REPO_ROOT, "scripts", "measure_speed.sh"),
                "--path",
                ",".join(paths),
                "--data",
                plan.bin,
                "--user-dir",
                os.path.join(REPO_ROOT, "lightcompress"),
                "--natural",
                "--num-sentences",
                str(n),
                "--timing-batch-size",
                str(batch),
                "--runs",
                str(o.speed_runs),
                "--threads",
                "1",
                "--beam",
                "5",
                "--max-len-a",
                "1.2",
                "--max-len-b",
                "10",
                "--onnx",
                "--ct2",
                # (int8 of every map: compress's default export since issue 55; rows timed
                # before keep their int8-large figures, named by their own int8 record)
                "--compare-int8",
                "--shortlist",
                shortlist,
                "--quiet",
                "--json",
                outs[batch],
            ]
        )
    if dry:
        for c in cmds:
            print("+ " + shlex.join(c))
        return
    if not os.path.exists(shortlist):
        plan.run_cmd(cmds[0], os.path.join(o.save_root, "shortlist.log"))
    for batch, cmd in zip((1, 32), cmds[1:]):
        # a finished batch size is kept (a stopped speed run goes on) only when it timed these
        # same models with these settings: its command is kept beside it
        made = outs[batch] + ".cmd"
        if os.path.exists(outs[batch]) and os.path.exists(made):
            with open(made, encoding="utf-8") as f:
                if f.read() == shlex.join(cmd):
                    continue
        for path in (outs[batch], made):
            if os.path.exists(path):
                os.remove(path)
        plan.run_cmd(cmd, os.path.join(o.save_root, f"speed-b{batch}.log"))
        with open(made, "w", encoding="utf-8") as f:
            f.write(shlex.join(cmd))
    doc = {
        "commands": plan.portable([shlex.join(c) for c in cmds]),
        "machine": machine(),
        "code": code_commit(),
        "batch_1": _speed_rows(_json(outs[1])),
        "batch_32": _speed_rows(_json(outs[32])),
        # (measure_speed's protocol and notes name the data-bin: DATA in the committed file)
        "protocol": plan.portable(_json(outs[1])["protocol"]),
        "notes": plan.portable(
            sorted({n for b in (1, 32) for n in _json(outs[b]).get("notes", [])})
        ),
    }
    if elsewhere or taken:
        doc = merge_speed_runs(earlier, doc)
    _write_json(spath, doc)
    print(f"[converged] speed -> {o.rows_dir}/speed.json", file=sys.stderr)


def _speed_runs(spd: dict | None) -> list[dict]:
    """The speed runs of a speed.json: one run (the whole document) or its ``runs``."""
    if not spd:
        return []
    return spd.get("runs", [spd])


def merge_speed_runs(earlier: dict | None, new: dict) -> dict:
    """``new`` (a run of the teacher and some rows) after the earlier runs, each row kept in
    the latest run that timed it; a run left with the teacher alone is dropped. A row's ratios
    are always against the teacher timed in its own run (machines differ between runs)."""
    mine = set(new["batch_1"]) - {"teacher"}
    runs = []
    for run in _speed_runs(earlier):
        run = json.loads(json.dumps(run))
        for b in ("batch_1", "batch_32"):
            run[b] = {k: v for k, v in run.get(b, {}).items() if k not in mine}
        if set(run["batch_1"]) - {"teacher"}:
            run["notes"] = [n for n in run.get("notes", []) if n.split(":")[0] not in mine]
            runs.append(run)
    return {"runs": [*runs, new]} if runs else new


def speed_of(spd: dict | None, label: str) -> tuple[int | None, dict]:
    """(index of the run that timed ``label``, that run); the teacher's is the first run."""
    runs = _speed_runs(spd)
    order = range(len(runs)) if label == "teacher" else range(len(runs) - 1, -1, -1)
    for i in order:
        if label in runs[i].get("batch_1", {}):
            return i, runs[i]
    return None, {}


def _speed_rows(doc: dict) -> dict:
    """label -> engine (with +shortlist) -> tokens/s, of measure_speed --json."""
    out: dict = {}
    for m in doc["models"]:
        prec = m.get("precision") or "float32"
        eng = m["engine"] + ("" if prec == "float32" else f"-{prec}")
        eng += "+shortlist" if m.get("shortlist") else ""
        out.setdefault(m["label"], {})[eng] = round(m["tokens_per_s"], 1)
    return out


# -- the table --------------------------------------------------------------------------------
INT8_NAME = {"int8-large": "int8 (large maps)", "int8": "int8 (every map)"}


def _teacher_scores() -> dict:
    """The shipped teacher's scores.json ({} where it is missing)."""
    path = os.path.join(TEACHER_DIR, "scores.json")
    return _json(path) if os.path.exists(path) else {}


def _load_rows(rows_dir: str) -> tuple[list[dict], dict | None]:
    recs = []
    for r in ROWS:
        path = os.path.join(rows_dir, f"{r}.json")
        if os.path.exists(path):
            recs.append(_json(path))
    spath = os.path.join(rows_dir, "speed.json")
    return recs, (_json(spath) if os.path.exists(spath) else None)


def _rows_and_teacher(rows_dir: str) -> tuple[list[dict], dict | None, dict]:
    """The finished rows, the speed record and the teacher's figures (held by compress rows)."""
    recs, spd = _load_rows(rows_dir)
    if not recs:
        raise PlanError(f"{rows_dir}: no row JSON (converged.py run writes them)")
    teacher = next((r["teacher"] for r in recs if r.get("teacher")), None)
    if teacher is None:
        raise PlanError(f"{rows_dir}: no compress row holds the teacher's figures")
    return recs, spd, teacher


def _fmt(v, spec="", none="-"):
    return none if v is None else format(v, spec)


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def _timing(recs: list[dict]) -> list[str]:
    """One line: each row's training time at its log's median speed (the CPU route's cost)."""
    timed = [r for r in recs if r.get("train_hours")]
    if not timed:
        return []

    def one(r):
        if not r.get("devices"):
            return f"{r['row']} {r['train_hours']:.1f} h ({r['ups_median']:.2f} updates/s)"
        return (
            f"{r['row']} {r['train_hours']:.1f} h ("
            + " + ".join(
                f"{p['updates']:,} updates at {p['ups_median']:.2f}/s on "
                f"{'one CPU thread' if p['device'] == 'this machine' else p['device']}"
                for p in r["devices"]
            )
            + ")"
        )

    return [
        "Training time of each row (its updates at the median updates/s of its fairseq log, "
        "validation excluded; one CPU thread unless its machine says otherwise): "
        + "; ".join(one(r) for r in timed)
        + ".",
        "",
    ]


def _exports_again(recs: list[dict]) -> list[str]:
    """One line: the rows whose float32 export was made again by later code (record-int8)."""
    again = [r for r in recs if r.get("onnx_export")]
    if not again:
        return []
    return [
        "Export sizes made again by later code from the same student (`record-int8`): "
        + "; ".join(
            f"{r['row']} {r['onnx_size_bytes'] / 1e6:.1f} MB (code {r['onnx_export']['code']}; "
            f"was {r['onnx_export']['was_bytes'] / 1e6:.1f} MB)"
            for r in again
        )
        + ".",
        "",
    ]


def table(rows_dir: str) -> str:
    """results.md from ROWS_DIR's JSON alone."""
    recs, spd, teacher = _rows_and_teacher(rows_dir)
    scores = _teacher_scores()
    tp = teacher["params"]
    lines = [
        "| model | params | x fewer | size | BLEU | chrF | BLEU - teacher | updates (best) |"
        + " b1 tok/s | b1 / CT2 int8 | b1 / CT2 int8, both shortlist | b32 tok/s | b32 / CT2 int8 "
        "| b32 / CT2 int8, both shortlist |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def speeds(label, eng="onnxruntime"):
        cells = []
        i, run = speed_of(spd, label)
        mark = "†" * (i or 0)  # a row timed in a later run: that run's machine and teacher
        for b in ("batch_1", "batch_32"):
            s = run.get(b, {})
            mine, ct2 = s.get(label, {}), s.get("teacher", {})
            own = mine.get(eng) if label != "teacher" else ct2.get("ctranslate2-int8")
            own_sl = (
                mine.get(f"{eng}+shortlist")
                if label != "teacher"
                else ct2.get("ctranslate2-int8+shortlist")
            )
            cells += [
                _fmt(own, ",.0f") + (mark if own else ""),
                _ratio(own, ct2.get("ctranslate2-int8")),
                _ratio(own_sl, ct2.get("ctranslate2-int8+shortlist")),
            ]
        return cells

    t_bleu = teacher["bleu"]
    lines.append(
        "| "
        + " | ".join(
            [
                "teacher (dense, CTranslate2 int8 for speed)",
                f"{tp:,}",
                "1x",
                f"{teacher['size_bytes'] / 1e6:.1f} MB",
                _fmt(t_bleu, ".2f"),
                _fmt(teacher["chrf"], ".2f"),
                "",
                "",
                *speeds("teacher"),
            ]
        )
        + " |"
    )
    for r in recs:
        # (a row without an export: its float32 weights, not its checkpoint_best.pt, which holds
        # Adam's state as well for some scratch rows)
        size = r.get("onnx_size_bytes") or 4 * r["params"]
        lines.append(
            "| "
            + " | ".join(
                [
                    r["row"],
                    f"{r['params']:,}",
                    _ratio(tp, r["params"]),
                    f"{size / 1e6:.1f} MB",
                    _fmt(r["bleu"], ".2f"),
                    _fmt(r["chrf"], ".2f"),
                    f"{r['bleu'] - t_bleu:+.2f}",
                    f"{_fmt(r.get('updates'))} ({_fmt(r.get('best_update'))})",
                    *speeds(r["row"]),
                ]
            )
            + " |"
        )
        q = r.get("int8")
        if q:
            lines.append(
                "| "
                + " | ".join(
                    [
                        f"{r['row']}, {INT8_NAME[q['precision']]}",
                        f"{r['params']:,}",
                        _ratio(tp, r["params"]),
                        f"{q['onnx_size_bytes'] / 1e6:.1f} MB",
                        _fmt(q["bleu"], ".2f"),
                        _fmt(q["chrf"], ".2f"),
                        f"{q['bleu'] - t_bleu:+.2f}",
                        "",
                        *speeds(r["row"], f"onnxruntime-{q['precision']}"),
                    ]
                )
                + " |"
            )
    by = {r["row"]: r for r in recs}
    sig = recs[0].get("bleu_signature")
    out = [
        "# Every method from the converged teacher",
        "",
        "Built by `converged.py table` from the JSON in this folder alone. Teacher: the shipped "
        f"`teacher/` (test BLEU {t_bleu}, chrF {teacher['chrf']}"
        + (f"; {scores.get('updates', '?')} updates" if scores else "")
        + "). Test split, beam 5, "
        f"sacreBLEU `{sig}`, chrF `{recs[0].get('chrf_signature')}`. Size: the ONNX Runtime "
        "export (where a row has no export: its float32 weights, 4 bytes a parameter). Speed: ONNX Runtime float32 "
        "of each student (an int8 line: its export with ONNX Runtime's dynamic int8 of every "
        "map or of the maps of at least 2^17 weights, as the line says, made and scored by "
        "compress's int8 step) against CTranslate2 "
        "int8 on the teacher, one thread, beam 5, test "
        "sentences at their natural lengths, every engine in one interleaved run per batch "
        'size; "both shortlist": student and teacher each with the shared vocabulary shortlist.',
        "",
        *lines,
        "",
        "Rows: " + "; ".join(f"`{r['row']}` {r['what']}" for r in recs) + ".",
        "",
        *_timing(recs),
        *_exports_again(recs),
        *_source_checks(recs),
        *_budgets(recs),
        "Where: "
        + "; ".join(
            sorted({f"{r['machine']} (code {r['code']}, {r['finished'][:10]})" for r in recs})
        )
        + ".",
        "",
        "## The papers' claims, in direction",
        "",
        *claims(by, teacher, spd),
        *_budget_note(recs),
        *_above_teacher(recs, teacher),
        *_not_finished(by),
    ]
    if spd:
        out += ["", *_speed_where(spd)]
        notes = sorted({n for run in _speed_runs(spd) for n in run.get("notes", [])})
        out += [
            "",
            (
                "What the speed runs left out (measure_speed's notes, as the code of each run "
                "wrote them; lightcompress-export-ct2 now exports a LightFormer, Smartformer or "
                "Hypoformer student without Admin as the dense Transformer it computes: "
                "docs/deployment.md):"
            ),
            "",
        ]
        out += [f"- {n}" for n in notes] or ["- nothing"]
    return "\n".join(out) + "\n"


def _speed_where(spd: dict) -> list[str]:
    runs = _speed_runs(spd)
    if len(runs) == 1:
        return [f"Speed: {runs[0]['machine']}, code {runs[0]['code']}."]
    out = [
        (
            f"Speed: {runs[0]['machine']}, code {runs[0]['code']} (the teacher's line and "
            "every row without a mark)."
        )
    ]
    for i, run in enumerate(runs[1:], 1):
        t = {b: run[b].get("teacher", {}).get("ctranslate2-int8") for b in ("batch_1", "batch_32")}
        rows = ", ".join(k for k in run["batch_1"] if k != "teacher")
        out.append(
            f"{'†' * i} {rows}: timed in a later run, {run['machine']}, code {run['code']}, "
            "against the teacher timed in that run (its CTranslate2 int8: "
            f"{_fmt(t['batch_1'], ',.0f')} tokens/s at batch 1, {_fmt(t['batch_32'], ',.0f')} at "
            "batch 32): its tokens/s are that machine's, its ratios compare with the others'."
        )
    return out


def _depth_claim(by: dict, spd: dict | None) -> str:
    """The shallow decoder (the default 3-1) against the teacher's depth: within 1 BLEU or
    not, and what it buys in speed (ONNX Runtime float32 at batch 1, the same run)."""
    a, b = "default", "lightformer_keep_depth"
    claim = (
        "LightFormer: a deep encoder and shallow decoder loses little (within 1 BLEU) "
        "against the teacher's depth"
    )
    if a not in by or b not in by:
        return f"- {claim}: not measured yet ({a if a not in by else b} has no finished row)."
    gap = by[a]["bleu"] - by[b]["bleu"]
    holds = gap >= -1.0
    line = (
        f"- {claim}: {'holds' if holds else 'does not hold'} here: {a} BLEU "
        f"{by[a]['bleu']:.2f} against {b} {by[b]['bleu']:.2f} ({gap:+.2f}, "
        f"{by[a]['params']:,} against {by[b]['params']:,} parameters)"
    )
    (ia, ra), (ib, rb) = speed_of(spd, a), speed_of(spd, b)
    fa = ra.get("batch_1", {}).get(a, {}).get("onnxruntime")
    fb = rb.get("batch_1", {}).get(b, {}).get("onnxruntime")
    if fa and fb and ia == ib:  # (tokens/s of one run only)
        line += f"; the shallow decoder decodes {fa / fb:.2f}x as fast at batch 1"
    why = _unequal(by[a], by[b])
    return line + (f"; {why}" if why else "") + "."


def _budget_text(r: dict) -> str:
    b = r["budget"]
    every = b.get("validate_every")
    text = (
        f"at most {b['max_update']:,} updates"
        + (f" of {b['max_tokens']:,} tokens" if b.get("max_tokens") else "")
        + f", validation every {'epoch' if every == 'epoch' else every}, "
        f"patience {b['patience']}"
    )
    if b.get("continued_from"):
        text += f", continued from its run stopped at {b['continued_from']['updates']:,} updates"
    if b.get("schedule_updates"):
        text += f" (its schedule set for {b['schedule_updates']:,})"
    return text


def _budgets(recs: list[dict]) -> list[str]:
    """The budget of every row; where rows had different budgets, which had which (a row whose
    budget was shrunk to fit the machine's time says so here and in its claim)."""
    groups: dict[str, list[str]] = {}
    for r in recs:
        groups.setdefault(_budget_text(r), []).append(r["row"])
    if len(groups) == 1:
        return [f"Budget of every row: {next(iter(groups))}."]
    parts = [
        f"{text} ({', '.join(rows)})"
        for text, rows in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]
    return ["Budget of the rows: " + "; ".join(parts) + "."]


def _no_early_stop(r: dict) -> bool:
    """A DA-WID row trains to its cap by design: compress gives its fairseq-train no
    ``--patience`` (its masks' schedule runs to ``--max-update``) and fuses the last checkpoint."""
    return r.get("method") == "dawid"


# fairseq-train's flags of a row's budget (each with its value): what a resumed row may change
BUDGET_FLAGS = (
    "--max-update",
    "--patience",
    "--validate-interval-updates",
    "--save-interval-updates",
    "--keep-interval-updates",
)


def _without_budget(cmd: list[str]) -> list[str]:
    """``cmd`` without the budget's flags and their values (:data:`BUDGET_FLAGS`)."""
    out, skip = [], False
    for word in cmd:
        if skip:
            skip = False
        elif word in BUDGET_FLAGS:
            skip = True
        else:
            out.append(word)
    return out


def _still_improving(r: dict) -> bool:
    """Stopped by its update cap with its lowest validation loss at the last validation (not
    a row that trains to its cap by design)."""
    return bool(
        not _no_early_stop(r)
        and r.get("stopped") == "max-update"
        and r.get("updates")
        and r.get("best_update") == r.get("updates")
    )


def _stopped_early(r: dict) -> bool:
    return (r.get("stopped") or "").startswith("early stop")


def _unequal(x: dict, y: dict) -> str:
    """What keeps rows ``x`` and ``y`` from a comparison at equal budgets ("" when nothing
    does): a row its cap stopped while it still improved (an unfinished row), and budgets that
    differ where it mattered (another validation interval or patience; another cap, unless
    both rows stopped early before theirs)."""
    notes = []
    open_ = [r for r in (x, y) if _still_improving(r)]
    if open_:
        notes.append(
            "compares unfinished rows: "
            + ", ".join(
                f"{r['row']} was stopped by its budget at {r['updates']:,} updates while still "
                "improving"
                for r in open_
            )
        )
    bx, by_ = x.get("budget") or {}, y.get("budget") or {}
    keys = ("validate_every", "patience", "max_tokens")
    same_cap = bx.get("max_update") == by_.get("max_update") or (
        _stopped_early(x) and _stopped_early(y)
    )
    if not same_cap or any(bx.get(k) != by_.get(k) for k in keys):
        patience = bx.get("patience") != by_.get("patience")
        parts = []
        for r, b in ((x, bx), (y, by_)):
            text = (
                f"{r['row']} {_fmt(r.get('updates'), ',')} updates of at most "
                f"{b.get('max_update', 0):,}"
            )
            parts.append(text + (f" (patience {b.get('patience')})" if patience else ""))
        notes.append("at unequal budgets: " + ", ".join(parts))
    elif _no_early_stop(x) != _no_early_stop(y):  # (the same budget, one row without early stop)
        r, o = (x, y) if _no_early_stop(x) else (y, x)
        if (r.get("updates") or 0) > (o.get("updates") or 0):
            notes.append(
                f"{r['row']} has no early stop (its masks' schedule runs to its cap): "
                f"{r['updates']:,} updates against {o['row']}'s {_fmt(o.get('updates'), ',')}"
            )
    return "; ".join(notes)


def _budget_note(recs: list[dict]) -> list[str]:
    """Rows the budget stopped while their validation loss still fell (best at the last)."""
    still = [r for r in recs if _still_improving(r)]
    if not still:
        return []
    names = ", ".join(
        f"{r['row']} (best at {r['best_update']:,} of {r['updates']:,} updates)" for r in still
    )
    return [f"- Stopped by the budget while still improving: {names}."]


CONTROL = "teacher_control"


def _above_teacher(recs: list[dict], teacher: dict) -> list[str]:
    """Rows that start from the teacher's weights and end more than 1 BLEU above it, against
    the control row (the teacher itself given the same extra training) where it is finished."""
    above = [r for r in recs if r["row"] not in SCRATCH and r["bleu"] - teacher["bleu"] > 1]
    if not above:
        return []
    sc = _teacher_scores()
    names = ", ".join(f"{r['row']} ({r['bleu'] - teacher['bleu']:+.2f})" for r in above)
    stop = (
        f" (the teacher: {sc['stopped']} at {sc['updates']:,} updates, its best at "
        f"{sc['best_update']:,})"
        if {"stopped", "updates", "best_update"} <= set(sc)
        else ""
    )
    line = (
        f"- Above the teacher by more than 1 BLEU: {names}. These start from the teacher's "
        f"weights and train up to {max(r.get('updates') or 0 for r in above):,} updates "
        f"more{stop}"
    )
    ctl = next((r for r in recs if r["row"] == CONTROL), None)
    if ctl is None:
        return [
            line + ": they lose nothing by the compression; whether the teacher itself gains "
            "as much from the same extra training is the control row's question "
            f"({CONTROL}: `converged.py run {CONTROL}`), not measured yet."
        ]
    gaps, parts = {}, []
    for r in above:
        gaps[r["row"]] = r["bleu"] - ctl["bleu"]
        why = _unequal(r, ctl)
        parts.append(f"{r['row']} {gaps[r['row']]:+.2f}" + (f" ({why})" if why else ""))
    each = "; ".join(parts)
    if max(gaps.values()) <= 0:
        verdict = (
            "the same extra training gives the teacher as much: the gain is not the compression's"
        )
    elif min(gaps.values()) > 0:
        verdict = "they stay above the teacher given the same extra training"
    else:
        verdict = "some stay above it, some do not"
    return [
        line + f". The control, the teacher itself fine-tuned the same way ({CONTROL}: "
        f"{_fmt(ctl.get('updates'), ',')} updates, {ctl.get('stopped') or 'stopped'}), "
        f"scores {ctl['bleu']:.2f} ({ctl['bleu'] - teacher['bleu']:+.2f}); against it: "
        f"{each}: {verdict}."
    ]


def claims(by: dict, teacher: dict, spd: dict | None = None) -> list[str]:
    """One line per claim whose rows are finished, in direction, said plainly either way."""

    def cmp(a, b, claim, why_not=""):
        if a not in by or b not in by:
            return f"- {claim}: not measured yet ({a if a not in by else b} has no finished row)."
        x, y = by[a], by[b]
        holds = x["bleu"] > y["bleu"]
        line = (
            f"- {claim}: {'holds' if holds else 'does not hold'} here: {a} BLEU {x['bleu']:.2f} "
            f"against {b} {y['bleu']:.2f} ({x['params']:,} against {y['params']:,} parameters)"
        )
        why = _unequal(x, y)
        if why:
            line += f"; {why}"
        return line + ("." if holds or not why_not else f"; {why_not}.")

    out = []
    if "default" in by:
        d = by["default"]
        gap = d["bleu"] - teacher["bleu"]
        ctl = by.get(CONTROL)
        out.append(
            f"- Several times smaller at the same BLEU (within 1 BLEU): "
            f"{'holds' if gap >= -1 else 'does not hold'} for the default student "
            f"({teacher['params'] / d['params']:.2f}x fewer parameters, {gap:+.2f} BLEU)"
            + (
                f"; against the control (the teacher given the same extra training, "
                f"{ctl['bleu']:.2f}): {d['bleu'] - ctl['bleu']:+.2f} BLEU."
                if ctl
                else "."
            )
        )
    out.append(
        cmp(
            "default",
            "lightformer_random",
            "LightFormer: SVD transfer beats random initialisation at equal updates",
        )
    )
    out.append(_depth_claim(by, spd))
    out.append(cmp("hypoformer_kd", "hypoformer", "Hypoformer: sequence-level KD helps"))
    why = ""
    if {"smartformer_search", "smartformer"} <= set(by):
        a, b = by["smartformer_search"], by["smartformer"]
        why = (
            "the searched model starts at its largest rank and is cut to the chosen ranks "
            "while it fine-tunes, the fixed one trains at its rank from the start (best "
            f"validation loss {a['best_valid_loss']:.3f} against {b['best_valid_loss']:.3f})"
        )
    out.append(
        cmp(
            "smartformer_search",
            "smartformer",
            "Smartformer: searched ranks beat one fixed rank at equal size",
            why,
        )
    )
    out.append(
        cmp(
            "dawid",
            "default",
            "DA-WID: weight-inherited distillation beats the LightFormer of the same "
            "non-embedding size (DA-WID keeps the teacher's embeddings)",
        )
    )
    out.append(_subformer_claim(by, teacher))
    out.extend(_deaf_rows(by))
    return out


def _subformer_claim(by: dict, teacher: dict) -> str:
    """Subformer (SAFE + sandwich sharing, from scratch, the teacher's recipe) against the
    teacher: within 1 BLEU with fewer parameters or not; the diagnostic rows (its paper's
    schedule, each initialisation) said after it."""
    claim = (
        "Subformer: sandwich sharing and SAFE, trained from scratch, come within 1 BLEU of "
        "the teacher with fewer parameters"
    )
    init = {
        "subformer_bert_init": "the authors' BERT initialisation",
        "subformer_fairseq_init": "fairseq's",
    }
    diag = [r for r in DIAGNOSTIC if r in by]
    dtext = "; ".join(
        f"{r} ({init[r]}, its paper's schedule) BLEU {by[r]['bleu']:.2f} after "
        f"{_fmt(by[r].get('updates'), ',')} updates of at most "
        f"{by[r]['budget']['max_update']:,} ({by[r].get('stopped') or '-'})"
        for r in diag
    )
    if len(diag) == 2:
        dtext += _subformer_inits(by[diag[0]], by[diag[1]])
    sc = _teacher_scores()
    if "subformer" not in by:
        return (
            f"- {claim}: not measured yet (subformer, trained with the teacher's recipe, has "
            "no finished row)" + (f"; the diagnostic rows: {dtext}" if diag else "") + "."
        )
    r = by["subformer"]
    holds = r["bleu"] >= teacher["bleu"] - 1 and r["params"] < teacher["params"]
    line = (
        f"- {claim}: {'holds' if holds else 'does not hold'} here: subformer BLEU "
        f"{r['bleu']:.2f} with {r['params']:,} parameters after "
        f"{_fmt(r.get('updates'), ',')} updates ({r.get('stopped') or '-'}), the teacher "
        f"{teacher['bleu']:.2f} with {teacher['params']:,}"
        + (
            f" after {sc['updates']:,} updates ({sc.get('stopped', '-')})"
            if "updates" in sc
            else ""
        )
        + ", both with the teacher's recipe"
    )
    notes = []
    if _still_improving(r):
        notes.append(
            f"compares an unfinished row: subformer was stopped by its budget at "
            f"{r['updates']:,} updates while still improving"
        )
    try:
        want = teacher_recipe(os.path.join(TEACHER_DIR, "checkpoint.pt"))[1]
    except PlanError:
        want = None
    got = r.get("budget") or {}
    if want and any(got.get(k) != v for k, v in want.items()):
        notes.append(
            f"at another budget than the teacher's: subformer {_budget_text(r)}, the "
            f"teacher {_budget_text({'budget': want})}"
        )
    if notes:
        line += "; " + "; ".join(notes)
    return line + (f". The diagnostic rows: {dtext}." if diag else ".")


def _warmup(rec: dict) -> int | None:
    for c in rec.get("commands", []):
        args = shlex.split(c)
        if "fairseq-train" in c and "--warmup-updates" in args:
            return int(args[args.index("--warmup-updates") + 1])
    return None


def _subformer_inits(a: dict, b: dict) -> str:
    """The two diagnostic rows' initialisations at the last update both validated at (their
    curves), with the warm-up each ran (the plan scales it with the budget)."""
    ca, cb = dict(a.get("valid_curve") or []), dict(b.get("valid_curve") or [])
    common = sorted(set(ca) & set(cb))
    if not common:
        return ""
    u = common[-1]
    return (
        f"; at {u:,} updates, validation loss {a['row']} {ca[u]:.3f}, {b['row']} {cb[u]:.3f} "
        f"(warm-up {_fmt(_warmup(a), ',')} against {_fmt(_warmup(b), ',')} updates: the plan "
        "scales it with the budget)"
    )


def _deaf_rows(by: dict) -> list[str]:
    """Rows whose encoder gives every source the same vector (source-check cosine >= 0.999)."""
    out = []
    for row, r in by.items():
        c = r.get("source_check") or {}
        if c.get("pooled_cosine", 0) < 0.999:
            continue
        line = (
            f"- {row} did not learn to translate: its encoder gives every source the same "
            f"vector (source-check cosine {c['pooled_cosine']:.3f}"
        )
        if c.get("translations"):
            line += (
                f"; {c['distinct_translations']:,} distinct of {c['translations']:,} "
                "test translations"
            )
        out.append(line + ").")
    return out


# -- command line ---------------------------------------------------------------------------
def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="converged.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "cmd",
        choices=[
            "plan",
            "run",
            "status",
            "speed",
            "table",
            "record",
            "record-int8",
            "source-check",
        ],
    )
    p.add_argument(
        "rows",
        nargs="*",
        help="run: these rows only (default: all, in order); "
        "record: ROW and the save directory of its finished compress run; "
        "source-check: rows to measure with source_check.py (a finished row's JSON gets "
        "the figures; a row still training: its last checkpoint's, printed)",
    )
    p.add_argument(
        "--data-dir",
        default=os.path.join(CACHE, "data", "results-permissive"),
        help="the permissive-only results corpus (bin/, raw/test.en)",
    )
    p.add_argument(
        "--save-root",
        default=os.path.join(CACHE, "converged"),
        help="every row's state, outside the checkout (resumable)",
    )
    p.add_argument(
        "--rows-dir", default=ROWS_DIR, help="the finished rows' JSON and the table (committed)"
    )
    p.add_argument(
        "--max-update",
        type=int,
        help="at most this many updates (default: the row's budget: 7,000 for the "
        "rows from the teacher, 20,000 for those trained until early stopping "
        f"({', '.join(EXTENDED)}); subformer: the teacher's own cap)",
    )
    p.add_argument(
        "--validate-every",
        type=int,
        help="updates between validations and checkpoints (default: the row's, 500; "
        "subformer: every epoch, as the teacher)",
    )
    p.add_argument(
        "--patience",
        type=int,
        help="stop after this many validations without a lower loss (default: the "
        "row's, 4; subformer: the teacher's)",
    )
    p.add_argument(
        "--again",
        action="store_true",
        help="run: train the named rows again even where their JSON exists (e.g. a "
        "row made at another budget than the plan's): a row goes on from its state "
        "directory where that holds a run of the same command (a stopped --again "
        "run: --again again), and a state directory of another command is refused "
        "(move it aside first); the JSON is replaced when the row finishes",
    )
    p.add_argument(
        "--schedule-updates",
        type=int,
        help="compress rows: the updates their schedules are set for (compress "
        "--schedule-updates; default: the row's budget's, 7,000 for the rows "
        "trained until early stopping, else --max-update)",
    )
    p.add_argument(
        "--continue-from",
        metavar="CHECKPOINT",
        help="run: go on training this checkpoint of the one row given (compress "
        "--continue-from, e.g. a row that stopped short of its target, moved aside: "
        "its SAVE/student/checkpoint_last.pt); the row's JSON records it",
    )
    p.add_argument("--cpu", action="store_true", help="train on the CPU even with a GPU")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per training (default 1)")
    p.add_argument("--speed-sentences", type=int, default=50)
    p.add_argument("--speed-runs", type=int, default=3)
    p.add_argument(
        "--readme",
        help="table: also write the README's results (at most six rows "
        "and a link to results.md's claims) between the <!-- converged --> and "
        "<!-- /converged --> "
        "markers of this file (default: the checkout's README.md when --rows-dir is "
        "the committed converged/ folder)",
    )
    return p


def main(argv=None) -> int:
    # rows and options in any order (``run --cpu hypoformer`` as ``run hypoformer --cpu``)
    opts = get_parser().parse_intermixed_args(argv)
    try:
        for v in (
            "max_update",
            "validate_every",
            "patience",
            "threads",
            "speed_sentences",
            "speed_runs",
        ):
            if getattr(opts, v) is not None and getattr(opts, v) < 1:
                raise PlanError(f"--{v.replace('_', '-')} must be a positive integer")
        if opts.cmd in ("record", "record-int8"):
            if len(opts.rows) != 2:
                raise PlanError(
                    f"{opts.cmd} takes ROW and DIR (a finished compress run's --save-dir)"
                )
            opts.rows, save = opts.rows[:1], opts.rows[1]
        bad = [r for r in opts.rows if r not in ROWS]
        if bad:
            raise PlanError(f"no row {bad[0]!r}: the rows are {', '.join(ROWS)}")
        if opts.schedule_updates is not None and opts.schedule_updates < 1:
            raise PlanError("--schedule-updates must be a positive integer")
        if opts.continue_from and (
            opts.cmd not in ("run", "plan") or len(opts.rows) != 1 or opts.rows[0] in SCRATCH
        ):
            raise PlanError(
                "--continue-from goes with `run ROW` (or `plan ROW`) and one compress "
                "row: the checkpoint of that row's earlier run"
            )
        if opts.continue_from and not os.path.isfile(opts.continue_from):
            raise PlanError(f"--continue-from {opts.continue_from}: no such file")
        plan = Plan(opts)
        if opts.cmd == "plan":
            plan.check(dry=True)
            for row in opts.rows or ROWS:
                print(f"# {row}: {WHAT[row]}")
                for c in plan.commands(row):
                    print("+ " + shlex.join(c))
            print("# speed: the teacher and every finished row, one interleaved run per batch size")
            speed(plan, dry=True)
            print(
                f"# table: python {os.path.relpath(__file__, REPO_ROOT)} table --rows-dir {opts.rows_dir}"
            )
        elif opts.cmd == "status":
            print("\n".join(status(plan)))
        elif opts.cmd == "run":
            if opts.again and not opts.rows:
                raise PlanError("--again goes with the rows to train again (run --again ROW ...)")
            plan.check(dry=False)
            for row in opts.rows or [r for r in ROWS if r not in DIAGNOSTIC]:
                plan.run_row(row)
        elif opts.cmd == "record":
            rec = Plan(opts).record(opts.rows[0], save)
            print(f"{opts.rows[0]}: BLEU {rec['bleu']} chrF {rec['chrf']}")
        elif opts.cmd == "record-int8":
            rec = Plan(opts).record_int8(opts.rows[0], save)
            print(f"{opts.rows[0]}, int8: BLEU {rec['int8']['bleu']} chrF {rec['int8']['chrf']}")
        elif opts.cmd == "speed":
            plan.check(dry=False)
            speed(plan, dry=False)
        elif opts.cmd == "source-check":
            for row in opts.rows:
                if os.path.exists(os.path.join(opts.rows_dir, f"{row}.json")):
                    rec = record_source_check(plan, row)["source_check"]
                    print(f"{row}: {json.dumps(rec)}")
                else:
                    last, rec = training_source_check(plan, row)
                    print(f"{row} (training; {last}, not recorded): {json.dumps(rec)}")
        else:
            text = table(opts.rows_dir)
            with open(os.path.join(opts.rows_dir, "results.md.tmp"), "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(
                os.path.join(opts.rows_dir, "results.md.tmp"),
                os.path.join(opts.rows_dir, "results.md"),
            )
            readme = opts.readme
            if readme is None and os.path.abspath(opts.rows_dir) == ROWS_DIR:
                readme = os.path.join(REPO_ROOT, "README.md")
            if readme:
                results_md = os.path.join(os.path.abspath(opts.rows_dir), "results.md")
                link = os.path.relpath(results_md, os.path.dirname(os.path.abspath(readme)))
                _update_readme(readme, compact(opts.rows_dir, link))
            print(text)
    except PlanError as exc:
        print(f"converged.py: {exc}", file=sys.stderr)
        return 2
    except StepError as exc:
        print(f"converged.py: {exc}", file=sys.stderr)
        return 1
    return 0


def _method(r: dict) -> str:
    """A row's method (the control's: teacher)."""
    row = r["row"]
    if row == "default":
        return "lightformer"
    return "teacher" if row == CONTROL else row.split("_")[0]


def front_rows(recs: list[dict]) -> list[dict]:
    """The README's rows: the default row and the best row (highest BLEU) of each other
    method, in the plan's order; the control row and the other rows stay in results.md."""
    by = {r["row"]: r for r in recs}
    if "default" not in by:
        raise PlanError("no default row: the README's results start from it")
    mine = _method(by["default"])
    best: dict[str, dict] = {}
    for r in recs:
        m = _method(r)
        if m in (mine, "teacher"):
            continue
        if m not in best or r["bleu"] > best[m]["bleu"]:
            best[m] = r
    keep = {"default", *(r["row"] for r in best.values())}
    return [r for r in recs if r["row"] in keep]


def compact(rows_dir: str, link: str = "results.md") -> str:
    """The README's results: at most six lines (the teacher, the default row with its int8
    export, the best row of each other method) and a line linking ``link`` (results.md: every
    row, the claims decided on them and the budgets), from the same JSON as results.md."""
    recs, spd, teacher = _rows_and_teacher(rows_dir)

    def vs_ct2(label, batch, eng="onnxruntime"):
        s = speed_of(spd, label)[1].get(batch, {})
        return _ratio(s.get(label, {}).get(eng), s.get("teacher", {}).get("ctranslate2-int8"))

    lines = [
        "| model | parameters | BLEU (vs teacher) | chrF | vs CTranslate2 int8 on the teacher, batch 1 / 32 |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| teacher 3-3 (dense) | {teacher['params']:,} | {teacher['bleu']:.2f} | {teacher['chrf']:.2f} | |",
    ]
    front = front_rows(recs)
    for r in front:  # one line a row; the default row's int8 export's figures after "int8"
        bleu = f"{r['bleu']:.2f} ({r['bleu'] - teacher['bleu']:+.2f})"
        chrf = f"{r['chrf']:.2f}"
        speed = f"{vs_ct2(r['row'], 'batch_1')} / {vs_ct2(r['row'], 'batch_32')}"
        q = r.get("int8") if r["row"] == "default" else None
        if q:
            eng = f"onnxruntime-{q['precision']}"
            bleu += f"; int8 {q['bleu']:.2f} ({q['bleu'] - teacher['bleu']:+.2f})"
            chrf += f"; int8 {q['chrf']:.2f}"
            speed += (
                f"; int8 {vs_ct2(r['row'], 'batch_1', eng)} / {vs_ct2(r['row'], 'batch_32', eng)}"
            )
        name = r["row"] if r["row"] == "default" else f"{r['row']} (best {_method(r)} row)"
        lines.append(
            f"| {name} | {r['params']:,} ({_ratio(teacher['params'], r['params'])} fewer) | "
            f"{bleu} | {chrf} | {speed} |"
        )
    rest = len(recs) - len(front)
    more = f"the other {rest} finished rows, " if rest else ""
    where = (
        f"Each claim with its figures, {more}each row's budget and where it was measured: "
        f"[results.md]({link}#the-papers-claims-in-direction)."
    )
    by = {r["row"]: r for r in recs}
    verdicts = claim_verdicts(claims(by, teacher, spd))
    return (
        "\n".join([*lines, "", "The papers' claims, in direction:", "", *verdicts, "", where])
        + "\n"
    )


_VERDICT = re.compile(r"^- (.+?): (holds|does not hold|not measured yet)\b")


_AGAINST_CONTROL = re.compile(r"; against the control \([^)]*\): ([+-][0-9.]+) BLEU")
# a verdict on one row (the size claim): "holds for the default student (4.06x fewer ...)"
_FOR_ROW = re.compile(r": (?:holds|does not hold) for (the [^(;]+?) \(([^)]*)\)")


def claim_verdicts(lines: list[str]) -> list[str]:
    """The README's short form of :func:`claims`' lines: each claim and its verdict, marked
    where its rows were stopped while improving or had unequal budgets (results.md says how)."""
    out = []
    for line in lines:
        m = _VERDICT.match(line)
        if not m:
            continue
        marks = [
            why
            for key, why in (
                ("compares unfinished rows", "rows stopped while improving"),
                ("at unequal budgets", "unequal budgets"),
            )
            if key in line
        ]
        row = _FOR_ROW.search(line)
        if row:  # (its figures first: what the verdict is on)
            marks.insert(0, f"{row.group(1)}: {row.group(2)}")
        ctl = _AGAINST_CONTROL.search(line)
        if ctl:
            marks.append(f"{ctl.group(1)} against the teacher given the same extra training")
        out.append(
            f"- {m.group(1)}: **{m.group(2)}**" + (f" ({'; '.join(marks)})" if marks else "")
        )
    return out


def _not_finished(by: dict) -> list[str]:
    """The claims' line on the rows of the plan with no finished row (diagnostic rows aside)."""
    todo = [r for r in ROWS if r not in by and r not in DIAGNOSTIC]
    if not todo:
        return []
    return [f"- No finished row yet from this teacher: {', '.join(todo)} (`converged.py run`)."]


def _update_readme(path: str, text: str) -> None:
    begin, end = "<!-- converged -->", "<!-- /converged -->"
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        raise PlanError(f"{path}: no {begin} ... {end} markers to write the table between")
    head, rest = doc.split(begin, 1)
    doc = head + begin + "\n" + text + end + rest.split(end, 1)[1]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(doc)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    sys.exit(main())
