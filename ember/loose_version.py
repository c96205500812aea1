"""`pyspark.loose_version.LooseVersion`: version strings compared piece by piece, as
distutils' LooseVersion did (PySpark kept its own copy when distutils left the standard
library, and code written for PySpark compares library versions with it)."""
from __future__ import annotations

import re
from typing import Any

_PIECE = re.compile(r"(\d+|[a-z]+|\.)", re.VERBOSE)


class LooseVersion:
    """"1.2.10" > "1.2.9"; numbers compare as numbers, letters as strings. A str compares as
    the LooseVersion it spells; anything else is a TypeError."""

    def __init__(self, vstring: str | None = None) -> None:
        if vstring is not None:
            self.parse(vstring)

    def parse(self, vstring: str) -> None:
        self.vstring = vstring
        pieces = [p for p in _PIECE.split(vstring) if p and p != "."]
        self.version: list[int | str] = [int(p) if p.isdigit() else p for p in pieces]

    def __str__(self) -> str:
        return self.vstring

    def __repr__(self) -> str:
        return f"LooseVersion ('{self}')"

    def _cmp(self, other: Any) -> int | Any:
        if isinstance(other, str):
            other = LooseVersion(other)
        elif not isinstance(other, LooseVersion):
            return NotImplemented
        if self.version == other.version:
            return 0
        return -1 if self.version < other.version else 1

    def __eq__(self, other: Any) -> Any:
        c = self._cmp(other)
        return c if c is NotImplemented else c == 0

    def __lt__(self, other: Any) -> Any:
        c = self._cmp(other)
        return c if c is NotImplemented else c < 0

    def __le__(self, other: Any) -> Any:
        c = self._cmp(other)
        return c if c is NotImplemented else c <= 0

    def __gt__(self, other: Any) -> Any:
        c = self._cmp(other)
        return c if c is NotImplemented else c > 0

    def __ge__(self, other: Any) -> Any:
        c = self._cmp(other)
        return c if c is NotImplemented else c >= 0

    __hash__ = None  # type: ignore[assignment]  (equal to strs, so not hashable)
