"""Durations as users write them (``90``, ``90s``, ``15m``, ``1h``, ``7d``, ``1w``): one reader for every flag,
variable and config key that takes one."""

from __future__ import annotations

import math
import re

__all__ = ["EXAMPLES", "UNITS", "human", "parse_duration"]

#: Seconds in each unit; no unit is seconds.
UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
#: What a message shows as examples of a duration.
EXAMPLES = "90, 90s, 15m, 1h, 7d or 1w"

_DURATION = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)")


def parse_duration(text: str) -> float:
    """Seconds of a duration: a number and an optional unit s, m, h, d or w (``1.5h``); a bare number is
    seconds, as a float reads it (``1e3``, and ``inf`` or ``nan`` for the caller's range check to refuse).

    The sign is kept, so a caller's range check can name its flag: ``-5m`` is -300.

    >>> parse_duration("15m"), parse_duration("1w"), parse_duration("3600")
    (900.0, 604800.0, 3600.0)
    """
    found = _DURATION.fullmatch(text.strip().lower())
    if found is not None:
        sign, number, unit = found.groups()
        return (-1.0 if sign == "-" else 1.0) * float(number) * UNITS[unit]
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a duration, e.g. {EXAMPLES}") from None


def human(seconds: float) -> str:
    """A duration as the largest whole unit that states it exactly: 3600 -> ``1h``, 90 -> ``90s``."""
    if math.isfinite(seconds):
        for unit in ("w", "d", "h", "m"):
            if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
                return f"{seconds / UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"
