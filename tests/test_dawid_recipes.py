"""The DA-WID recipes' training commands are ones fairseq-train accepts: every ``fairseq-train``
line that a dry run (DRY_RUN=1) of examples/translation/dawid/iwslt14-dawid.sh and of the GLUE
scripts of examples/classification/dawid/ prints is parsed by fairseq-train's own parser, with
the plugin's --user-dir. A flag fairseq refuses (the dense models' --dropout given to --arch
dawid, which keeps its teacher's dropout) would otherwise end the first real DA-WID training,
after the teacher's."""

import os
import shlex
import subprocess
import sys

import pytest
from harness import REPO_ROOT, USER_DIR

RECIPES = [
    ("examples/translation/dawid/iwslt14-dawid.sh", ["transformer_iwslt_de_en", "dawid"]),
    ("examples/classification/dawid/glue-RTE.sh", ["roberta_base", "dawid_roberta"]),
    ("examples/classification/dawid/glue-STS-B.sh", ["roberta_base", "dawid_roberta"]),
]


def _train_commands(script: str, tmp_path) -> list[list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("SAVE_ROOT", "DATA_BIN", "TEACHER")}
    # USER_DIR: this checkout's plugin (the one this process imports), not an installed copy
    env.update(
        DRY_RUN="1",
        PYTHON=sys.executable,
        NUM_GPUS="0",
        USER_DIR=USER_DIR,
        PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
    )
    proc = subprocess.run(
        ["bash", os.path.join(REPO_ROOT, script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    commands = [
        shlex.split(line[2:])
        for line in proc.stdout.splitlines()
        if line.startswith("+ fairseq-train ")
    ]
    # the same-size LightFormer's rank is known only once the fused model exists
    return [["8" if a == "RANK" else a for a in c] for c in commands]


@pytest.mark.parametrize("script, archs", RECIPES, ids=[r[0].split("/")[-1] for r in RECIPES])
def test_every_training_command_of_the_dawid_recipes_parses(script, archs, tmp_path, capsys):
    from fairseq import options

    commands = _train_commands(script, tmp_path)
    parsed = []
    for argv in commands:
        try:
            args = options.parse_args_and_arch(options.get_training_parser(), argv[1:])
        except SystemExit:
            pytest.fail(
                f"fairseq-train refuses {shlex.join(argv)[:300]}: {capsys.readouterr().err}"
            )
        parsed.append(args)
    got = [a.arch for a in parsed]
    assert got[: len(archs)] == archs, got
    student = parsed[archs.index(archs[-1])]
    assert student.criterion == "dawid" and student.dawid_masks == "dim,head,layer"
    # the student keeps its teacher's dropout: the flag is fairseq's default, not given
    assert "--dropout" not in commands[archs.index(archs[-1])]
