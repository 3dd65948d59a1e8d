"""Tests of examples/translation/l10n_corpus.py (the results corpus builder) on fixture
packages made here: a tiny .deb, a tiny wheel with JSON catalogs. No network."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import struct
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

__all__: list[str] = []

_DIR = Path(__file__).resolve().parents[2] / "examples" / "translation"
sys.path.insert(0, str(_DIR))
_spec = importlib.util.spec_from_file_location("l10n_corpus", _DIR / "l10n_corpus.py")
assert _spec is not None and _spec.loader is not None
lc = importlib.util.module_from_spec(_spec)
sys.modules["l10n_corpus"] = lc
_spec.loader.exec_module(lc)
pc = lc.pc


def _mo(messages: dict[str, str]) -> bytes:
    """A little-endian .mo file for msgid -> msgstr."""
    keys = sorted(messages)
    ids = [k.encode() for k in keys]
    strs = [messages[k].encode() for k in keys]
    n = len(keys)
    o_orig, o_trans = 28, 28 + 8 * n
    pos = o_trans + 8 * n
    table_o, table_t, blob = b"", b"", b""
    for s in ids:
        table_o += struct.pack("<2I", len(s), pos + len(blob))
        blob += s + b"\0"
    for s in strs:
        table_t += struct.pack("<2I", len(s), pos + len(blob))
        blob += s + b"\0"
    head = struct.pack("<7I", 0x950412DE, 0, n, o_orig, o_trans, 0, 0)
    return head + table_o + table_t + blob


def _deb(path: Path, files: dict[str, bytes]) -> Path:
    """A .deb (ar archive: debian-binary, control.tar.xz, data.tar.xz) holding ``files``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo("./" + name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.xz", b""),
        ("data.tar.xz", buf.getvalue()),
    ]
    out = b"!<arch>\n"
    for name, data in members:
        hdr = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n"
        out += hdr.encode() + data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(out)
    return path


COPYRIGHT = b"Format: copyright-format/1.0\nFiles: *\nLicense: ISC\n Permission to use...\n"


def _pkg_deb(tmp: Path, name: str, messages: dict[str, str], copyright_: bytes = COPYRIGHT):
    return _deb(
        tmp / f"{name}_1.0-1_all.deb",
        {
            f"usr/share/locale/de/LC_MESSAGES/{name}.mo": _mo(messages),
            f"usr/share/locale/fr/LC_MESSAGES/{name}.mo": _mo({"Open the file": "Ouvrir"}),
            f"usr/share/doc/{name}/copyright": copyright_,
        },
    )


def _json_wheel(path: Path) -> Path:
    meta = "Metadata-Version: 2.1\nName: jsonapp\nVersion: 1.0\nLicense-Expression: MIT\n"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("jsonapp-1.0.dist-info/METADATA", meta)
        en = {
            "title": "Save the settings",
            "err": {"auth": "Invalid password given"},
            "only_en": "Only in English here",
        }
        de = {"title": "Einstellungen speichern", "err": {"auth": "Ungültiges Passwort angegeben"}}
        z.writestr("jsonapp/translations/en.json", json.dumps(en))
        z.writestr("jsonapp/translations/de.json", json.dumps(de))
        # hashed fragment names (Home Assistant's frontend) and i18next folders (Airflow)
        z.writestr(
            "jsonapp/static/translations/config/en-0123abcd.json",
            json.dumps({"a": "Delete this dashboard"}),
        )
        z.writestr(
            "jsonapp/static/translations/config/de-89abcdef.json",
            json.dumps({"a": "Dieses Dashboard löschen"}),
        )
        z.writestr("jsonapp/ui/i18n/locales/en/dag.json", json.dumps({"x": ["Run the task now"]}))
        z.writestr(
            "jsonapp/ui/i18n/locales/de/dag.json", json.dumps({"x": ["Aufgabe jetzt ausführen"]})
        )
        # not a catalog: locale data (CLDR) outside a translations folder
        z.writestr("jsonapp/static/locale-data/intl-listformat/de.json", json.dumps({"a": "und"}))
        z.writestr("jsonapp/static/locale-data/intl-listformat/en.json", json.dumps({"a": "and"}))
    return path


def test_deb_archive_reads_german_catalogs_only(tmp_path):
    deb = _pkg_deb(
        tmp_path, "tool", {"Open the file": "Die Datei öffnen", "&Quit now": "&Jetzt beenden"}
    )
    ar = lc.DebArchive(deb)
    try:
        assert "usr/share/doc/tool/copyright" in ar.names
        pairs, files = lc.archive_all_pairs(ar)
    finally:
        ar.close()
    assert files == ["usr/share/locale/de/LC_MESSAGES/tool.mo"]
    assert sorted(pairs) == [("&Quit now", "&Jetzt beenden"), ("Open the file", "Die Datei öffnen")]
    # cleaning is po_corpus's: accelerators go
    assert ("Quit now", "Jetzt beenden") in list(pc.clean_pairs(pairs))


def test_deb_archive_rejects_non_deb(tmp_path):
    bad = tmp_path / "x.deb"
    bad.write_bytes(b"PK\x03\x04 not an ar archive")
    with pytest.raises(ValueError, match="not a Debian package"):
        lc.DebArchive(bad)


def test_json_catalogs_pair_by_key(tmp_path):
    whl = _json_wheel(tmp_path / "jsonapp-1.0-py3-none-any.whl")
    ar = pc._Archive(whl)
    try:
        cats = dict(lc.json_catalogs(ar.names))
        pairs, files = lc.archive_all_pairs(ar)
    finally:
        ar.close()
    assert cats == {
        "jsonapp/translations/de.json": "jsonapp/translations/en.json",
        "jsonapp/static/translations/config/de-89abcdef.json": "jsonapp/static/translations/config/en-0123abcd.json",
        "jsonapp/ui/i18n/locales/de/dag.json": "jsonapp/ui/i18n/locales/en/dag.json",
    }
    assert len(files) == 3  # locale-data is not a catalog
    assert sorted(pairs) == [
        ("Delete this dashboard", "Dieses Dashboard löschen"),
        ("Invalid password given", "Ungültiges Passwort angegeben"),
        ("Run the task now", "Aufgabe jetzt ausführen"),
        ("Save the settings", "Einstellungen speichern"),
    ]  # the key missing in de.json gives no pair


def test_json_catalog_pairs_skips_empty_and_missing():
    en = json.dumps({"a": "Start the engine", "b": "Stop it now", "c": ""})
    de = json.dumps({"a": "Motor starten", "b": "", "c": "Leer"})
    assert lc.json_catalog_pairs(en, de) == [("Start the engine", "Motor starten")]


def _src(name, cls=lc.PERMISSIVE, group="", registry="debian"):
    return lc.Source(
        registry,
        name,
        "1.0-1",
        f"{name}_1.0-1_all.deb",
        "0" * 64,
        "ISC",
        "License: ISC",
        cls,
        group,
    )


def test_group_split_keeps_a_project_in_one_split():
    srcs = [
        _src("pg-server", group="pg"),
        _src("pg-client", group="pg"),
        _src("a"),
        _src("b"),
        _src("c"),
    ]
    split_of = lc.assign_group_splits(srcs, valid=["a"], test=["pg-client"])
    assert split_of == {
        "pg-server": "test",
        "pg-client": "test",
        "a": "valid",
        "b": "train",
        "c": "train",
    }
    # a group name works as well, and a package named twice across splits is refused
    assert lc.assign_group_splits(srcs, valid=["pg"], test=["a"])["pg-server"] == "valid"
    with pytest.raises(ValueError, match="both valid and test"):
        lc.assign_group_splits(srcs, valid=["pg-server"], test=["pg-client"])
    with pytest.raises(ValueError, match="not among the selected"):
        lc.assign_group_splits(srcs, valid=["nope"], test=["a"])


def test_copyleft_data_only_in_train():
    srcs = [_src("a"), _src("b"), _src("gpl", cls=lc.COPYLEFT_DATA)]
    assert lc.assign_group_splits(srcs, valid=["a"], test=["b"])["gpl"] == "train"
    with pytest.raises(ValueError, match="only training data"):
        lc.assign_group_splits(srcs, valid=["a"], test=["gpl"])
    chosen = lc.select_sources(None, permissive_only=True, sources=srcs)
    assert [s.name for s in chosen] == ["a", "b"]


@pytest.mark.parametrize("reserved", sorted(lc.RESERVED))
def test_reserved_packages_refused_everywhere(reserved):
    srcs = [_src("a"), _src("b"), _src("c")]
    with pytest.raises(ValueError, match="reserved"):
        lc.select_sources(None, False, sources=[*srcs, _src(reserved)])
    with pytest.raises(ValueError, match="reserved"):
        lc.select_sources(None, False, sources=[*srcs, _src("x", group=reserved)])
    with pytest.raises(ValueError, match="reserved"):
        lc.select_sources(["a", reserved], False, sources=srcs)
    with pytest.raises(ValueError, match="reserved"):
        lc.assign_group_splits(srcs, valid=[reserved], test=["a"])
    with pytest.raises(ValueError, match="reserved"):
        lc.assign_group_splits(srcs, valid=["a"], test=[reserved])


def test_pinned_sources_are_sound():
    names = [s.name for s in lc.SOURCES]
    assert len(names) == len(set(names))
    assert not set(names) & lc.RESERVED
    assert not {s.split_group for s in lc.SOURCES} & lc.RESERVED
    for s in lc.SOURCES:
        assert len(s.sha256) == 64 and int(s.sha256, 16) >= 0, s.name
        assert s.registry in ("pypi", "debian") and s.licence_class in (
            lc.PERMISSIVE,
            lc.COPYLEFT_DATA,
        )
        if s.licence_class == lc.PERMISSIVE:
            assert not pc.COPYLEFT_RE.search(s.licence), s.name
    # the default valid / test packages are permissive and in different groups
    split_of = lc.assign_group_splits(list(lc.SOURCES), lc.DEFAULT_VALID, lc.DEFAULT_TEST)
    assert {split_of[n] for n in lc.DEFAULT_VALID} == {"valid"}
    assert {split_of[n] for n in lc.DEFAULT_TEST} == {"test"}


def test_wrong_licence_marker_refused(tmp_path):
    deb = _pkg_deb(
        tmp_path, "tool", {"Open the file": "Die Datei öffnen"}, copyright_=b"License: GPL-2+\n"
    )
    ar = lc.DebArchive(deb)
    try:
        with pytest.raises(SystemExit, match="licence marker"):
            lc.check_source_licence(_src("tool"), ar, deb)
    finally:
        ar.close()


MESSAGES = {
    "a": {
        "Open the selected file": "Die ausgewählte Datei öffnen",
        "Close all windows": "Alle Fenster schließen",
        "Shared sentence here": "Geteilter Satz hier",
    },
    "b": {
        "Print the whole page": "Die ganze Seite drucken",
        "Shared sentence here": "Geteilter Satz hier",
    },
    "c": {
        "Cancel the print job": "Druckauftrag abbrechen",
        "<b>Stop</b> the server": "Server <b>stoppen</b>",
    },
    "gpl": {
        "Rename the branch": "Den Zweig umbenennen",
        "Print the whole page": "Ganze Seite drucken",
    },
}


def test_build_end_to_end_and_skip(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    srcs = []
    for name, msgs in MESSAGES.items():
        deb = _pkg_deb(cache, name, msgs)
        cls = lc.COPYLEFT_DATA if name == "gpl" else lc.PERMISSIVE
        srcs.append(
            lc.Source(
                "debian", name, "1.0-1", deb.name, pc.sha256_of(deb), "ISC", "License: ISC", cls
            )
        )
    monkeypatch.setattr(lc, "SOURCES", tuple(srcs))
    out = tmp_path / "corpus"
    argv = [
        "--out",
        str(out),
        "--cache",
        str(cache),
        "--valid-packages",
        "b",
        "--test-packages",
        "c",
        "--vocab-size",
        "60",
        "--workers",
        "1",
    ]
    assert lc.main(argv) == 0
    raw = out / "raw"
    train = list(
        zip(
            (raw / "train.en").read_text().splitlines(), (raw / "train.de").read_text().splitlines()
        )
    )
    valid_de = (raw / "valid.de").read_text().splitlines()
    test_en = (raw / "test.en").read_text().splitlines()
    assert sorted(test_en) == ["Cancel the print job", "Stop the server"]  # tags stripped
    # valid sources leave train: the shared sentence is in valid (package b) only
    assert "Geteilter Satz hier" in valid_de
    assert all(de != "Geteilter Satz hier" for _, de in train)
    assert ("Rename the branch", "Den Zweig umbenennen") in train  # copyleft-data: train only
    rows = (out / "SOURCES.tsv").read_text().splitlines()
    assert rows[0].startswith("registry\tpackage\tversion\tlicence\tlicence_class")
    by_pkg = {r.split("\t")[1]: r.split("\t") for r in rows[1:]}
    assert by_pkg["gpl"][4] == lc.COPYLEFT_DATA and by_pkg["gpl"][12] == "train"
    assert by_pkg["c"][12] == "test"
    stats = json.loads((out / "stats.json").read_text())
    assert stats["pairs"] == {"train": len(train), "valid": 2, "test": 2}
    assert stats["reserved_excluded"] == sorted(lc.RESERVED)
    assert (out / "bin" / "train.de-en.de.bin").exists() and (out / ".complete").exists()
    capsys.readouterr()
    assert lc.main(argv) == 0  # finished build detected and skipped
    assert "nothing to do" in capsys.readouterr().out
    # --permissive-only is another corpus (another fingerprint): built again, without the
    # copyleft package (the writer is recorded here instead of training sentencepiece again)
    written = {}
    monkeypatch.setattr(lc.pc, "write_corpus", lambda out_, splits, *a, **k: written.update(splits))
    assert lc.main([*argv, "--permissive-only"]) == 0
    assert "rebuilding" in capsys.readouterr().out
    assert ("Rename the branch", "Den Zweig umbenennen") not in written["train"]


def test_bad_sha256_in_cache_stops(tmp_path, monkeypatch):
    deb = _pkg_deb(tmp_path, "tool", {"Open the file": "Die Datei öffnen"})
    src = lc.Source("debian", "tool", "1.0-1", deb.name, "f" * 64, "ISC", "License: ISC")
    monkeypatch.setitem(
        lc.DEBIAN_POOL, "tool", "debian/pool/main/t/tool/tool_1.0-1+deb12u1_all.deb"
    )

    def offline(url, dest):
        raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    # the wrong file is dropped and fetched again; offline and without apt-get that is one
    # clear stop naming the URL and where to put the file
    monkeypatch.setattr(lc.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as stop:
        lc.download_debs([src], tmp_path, fetch=offline)
    msg = str(stop.value)
    assert msg.startswith(
        "tool: cannot download https://deb.debian.org/debian/pool/main/t/tool/"
        "tool_1.0-1%2Bdeb12u1_all.deb: <urlopen error"
    )
    assert f"fetch it by hand into {deb}" in msg and "\n" not in msg
    assert not deb.exists()


def test_debian_pins_are_fetched_from_the_mirror_and_checked(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    deb = _pkg_deb(mirror, "tool", {"Open the file": "Die Datei öffnen"})
    digest = lc.pc.sha256_of(deb)
    src = lc.Source(
        "debian", "tool", "1:1.0-1", "tool_1%3a1.0-1_all.deb", digest, "ISC", "License: ISC"
    )
    monkeypatch.setitem(lc.DEBIAN_POOL, "tool", "debian/pool/main/t/tool/tool_1.0-1_all.deb")
    asked = []

    def from_mirror(url, dest):  # (lc.fetch_url with the mirror in a directory)
        asked.append(url)
        lc.fetch_url(mirror.as_uri() + "/" + deb.name, dest)

    cache = tmp_path / "cache"
    got = lc.download_debs([src], cache, fetch=from_mirror)
    assert asked == ["https://deb.debian.org/debian/pool/main/t/tool/tool_1.0-1_all.deb"]
    assert got == {"tool": cache / "tool_1%3a1.0-1_all.deb"}  # (apt-get's name for the file)
    assert got["tool"].read_bytes() == deb.read_bytes()
    assert lc.download_debs([src], cache, fetch=None) == got  # cached: nothing fetched
    # a file the mirror changed is refused by its pin
    monkeypatch.setattr(lc.pc, "sha256_of", lambda p: "0" * 64)
    with pytest.raises(SystemExit, match="tool: sha256 0{64} != pinned"):
        lc.download_debs([src], tmp_path / "other", fetch=from_mirror)


def test_fetch_url_leaves_no_partial_file(tmp_path):
    dest = tmp_path / "x.deb"
    with pytest.raises(OSError):
        lc.fetch_url((tmp_path / "missing.deb").as_uri(), dest)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "src.deb").write_bytes(b"!<arch>\n")
    lc.fetch_url((tmp_path / "src.deb").as_uri(), dest)
    assert dest.read_bytes() == b"!<arch>\n" and not dest.with_name("x.deb.part").exists()


def test_every_debian_pin_has_its_place_on_the_mirror():
    debs = [s for s in lc.SOURCES if s.registry == "debian"]
    assert {s.name for s in debs} == set(lc.DEBIAN_POOL)
    for s in debs:
        path = lc.DEBIAN_POOL[s.name]
        assert path.startswith(("debian/pool/main/", "debian-security/pool/updates/main/")), path
        # the mirror's file name is the pin's without apt-get's quoted epoch
        assert path.rsplit("/", 1)[1] == re.sub(r"_\d+%3a", "_", s.filename), (path, s.filename)
