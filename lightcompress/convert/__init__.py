"""Checkpoint converters (``lightcompress-convert``), by student model name.

:data:`CONVERTERS` holds the converter of every declared family (its
:class:`~lightcompress.models.family.Transfer`, run by :mod:`lightcompress.convert.family`),
read from :data:`lightcompress.models.family.FAMILIES` when asked (a family registered later
is there too), and the converters plug-ins register with :func:`register_converter` (which
take precedence for their model name).
"""

from collections.abc import Iterator, Mapping

from lightcompress.convert import core
from lightcompress.convert.core import ConversionError, register_converter
from lightcompress.convert.family import family_converters

__all__ = ["CONVERTERS", "ConversionError", "register_converter"]


class _Converters(Mapping):
    """Student model name -> converter class (families' and registered ones), read live."""

    def _table(self) -> dict[str, type]:
        return {**family_converters(), **core.CONVERTERS}

    def __getitem__(self, name: str) -> type:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"CONVERTERS({sorted(self._table())})"


CONVERTERS = _Converters()
