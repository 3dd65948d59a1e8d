"""The LightFormer recipes README names every script of its two folders, and only real ones.

examples/translation/lightformer/README.md has one table row per script of
examples/translation/lightformer/ and examples/summarization/lightformer/; a script added,
renamed or removed without updating the table fails here.
"""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = [
    os.path.join(ROOT, "examples", "translation", "lightformer"),
    os.path.join(ROOT, "examples", "summarization", "lightformer"),
]
README = os.path.join(FOLDERS[0], "README.md")
SHARED = {"common.sh"}  # sourced by the others, not a recipe


def recipe_scripts():
    """Basenames of the row, baseline and prepare scripts of both folders."""
    names = {os.path.basename(p) for d in FOLDERS for p in glob.glob(os.path.join(d, "*.sh"))}
    return names - SHARED


def missing_from(readme_text, scripts):
    """Scripts not named in the README as `name.sh` (in backticks)."""
    return sorted(s for s in scripts if f"`{s}`" not in readme_text)


def named_in(readme_text):
    """Bare `name.sh` names in backticks (paths such as `scripts/x.sh` are not bare names)."""
    return set(re.findall(r"`([\w.-]+\.sh)`", readme_text))


def read_readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def test_both_folders_have_their_scripts():
    scripts = recipe_scripts()
    # guards against a vacuous pass (a wrong path globbing nothing)
    assert {"prepare-iwslt14.sh", "table2-iwslt14-lightformer.sh"} <= scripts
    assert {"prepare-gigaword.sh", "table4-gigaword-lightformer.sh"} <= scripts
    assert len(scripts) >= 40


def test_readme_names_every_script():
    assert missing_from(read_readme(), recipe_scripts()) == []


def test_readme_names_no_script_that_does_not_exist():
    assert named_in(read_readme()) - recipe_scripts() - SHARED == set()


def test_the_check_fails_when_a_script_is_left_out():
    text = read_readme().replace("`table8-lightformer-6-6-groups1.sh`", "")
    assert missing_from(text, recipe_scripts()) == ["table8-lightformer-6-6-groups1.sh"]
    assert named_in("`table9-pi.sh` and `scripts/measure_speed.sh`") == {"table9-pi.sh"}
