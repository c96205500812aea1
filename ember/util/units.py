"""Sizes and durations as Spark writes them: one parser each, one byte formatter.

Spark reads "512m", "2g", "100ms" and "1min" through JavaUtils.byteStringAs / timeStringAs,
where a bare number counts in the key's own unit (spark.executor.memory: MiB;
Utils.memoryStringToMb and the byteFromString variants: bytes; spark.network.timeout:
seconds). Every reader in Ember goes through these functions with that unit as a parameter,
so "512" can never mean megabytes in one daemon and bytes in another. The grammar is
Spark's (digits, optional suffix, case-insensitive, trimmed); the few places that accepted
more before (a sign, a fraction, a space before the suffix) keep doing so through explicit
flags. Errors are ValueErrors with Spark's texts; callers that name a key wrap them.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["BYTE_UNITS", "TIME_UNITS", "KiB", "MiB", "GiB", "parse_size", "parse_duration",
           "duration_to_string", "bytes_to_string", "megabytes_to_string"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# JavaUtils.byteSuffixes
BYTE_UNITS: dict[str, int] = {
    "b": 1, "k": KiB, "kb": KiB, "m": MiB, "mb": MiB, "g": GiB, "gb": GiB,
    "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}

# JavaUtils.timeSuffixes (seconds per unit), plus "sec", which Ember always accepted
TIME_UNITS: dict[str, float] = {
    "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
    "d": 86400.0}

_NUMBER = r"(?P<num>(?P<sign>[+-])?(?P<int>[0-9]+)?(?P<frac>\.[0-9]*)?)"


def _split(text: str, spaces: bool) -> re.Match[str] | None:
    m = re.fullmatch(_NUMBER + (r"\s*" if spaces else "") + r"(?P<suffix>[a-z]*)", text)
    if m is None or not (m.group("int") or (m.group("frac") or ".")[1:]):
        return None
    return m


def parse_size(text: Any, bare_unit: str = "b", *, fractions: bool = False,
               signed: bool = False, spaces: bool = False) -> int:
    """Bytes in a size string: "512m" -> 536870912; a bare number counts `bare_unit`
    ("b" as Utils.memoryStringToMb / byteStringAsBytes, "m" as spark.executor.memory).

    Spark's grammar rejects fractions ("1.5g"), signs and a space before the suffix; the
    flags admit them for the readers that always did (a fraction rounds to whole bytes).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return text * BYTE_UNITS[bare_unit]
    s = str(text).strip().lower()
    m = _split(s, spaces)
    if m is None:
        raise ValueError(f"Failed to parse byte string: {text}")
    if m.group("frac") is not None and not fractions:
        raise ValueError(f"Fractional values are not supported. Input was: {text}")
    if m.group("sign") is not None and not signed:
        raise ValueError(f"Failed to parse byte string: {text}")
    suffix = m.group("suffix")
    if suffix and suffix not in BYTE_UNITS:
        raise ValueError(f'Invalid suffix: "{suffix}"')
    scale = BYTE_UNITS[suffix or bare_unit]
    if m.group("frac") is None:
        n = int(m.group("num"))
        if abs(n) >= 2 ** 63:
            raise ValueError(f"Size too large: {text}")
        return n * scale
    return round(float(m.group("num")) * scale)


def parse_duration(text: Any, bare_unit: str = "s", *, signed: bool = True) -> float:
    """Seconds in a time string (Spark's timeStringAs): "10s" -> 10.0, "100ms" -> 0.1,
    "1min" -> 60.0; a bare number counts `bare_unit` (the key's default unit). Fractions
    ("1.5s") are accepted, as Ember always did."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) * TIME_UNITS[bare_unit]
    m = _split(str(text).strip().lower(), spaces=True)
    if m is None or (m.group("sign") is not None and not signed):
        raise ValueError(f"Failed to parse time string: {text}")
    suffix = m.group("suffix")
    if suffix and suffix not in TIME_UNITS:
        raise ValueError(f'Invalid suffix: "{suffix}"')
    return float(m.group("num")) * TIME_UNITS[suffix or bare_unit]


def duration_to_string(seconds: float) -> str:
    """A duration as Spark's time strings write it, in its largest exact unit: 3600 -> '1h',
    90 -> '90s', 0.5 -> '500ms'."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0),
                       ("ms", 0.001)):
        if seconds >= size and abs(seconds / size - round(seconds / size)) < 1e-9:
            return f"{round(seconds / size)}{unit}"
    return f"{seconds:g}s"


def bytes_to_string(size: int) -> str:
    """Spark's Utils.bytesToString: '512.0 B', '2.0 KiB', '1024.0 MiB' (a unit from 2 of it)."""
    for unit, scale in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40),
                        ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if size >= 2 * scale:
            return f"{size / scale:.1f} {unit}"
    return f"{float(size):.1f} B"


def megabytes_to_string(mb: int) -> str:
    """Spark's Utils.megabytesToString: '1024.0 MiB', '7.0 GiB'."""
    return bytes_to_string(int(mb) * MiB)
