"""Durations, moments and sizes in the words people read on a page.

Framework-free and pure, so the pages, their tests and any later report format the same way:
milliseconds below a second, seconds with one decimal below a minute, then minutes and hours.
"""

import re
from datetime import UTC, datetime, timedelta

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
# Beyond this a relative time ("41 days ago") says less than the date itself.
RELATIVE_UNTIL = 30 * DAY


def duration_text(seconds: float) -> str:
    """'850 ms', '4.2 s', '4 min 05 s', '2 h 03 min', '3 d 04 h'; negative values keep their sign."""
    if seconds < 0:
        return "-" + duration_text(-seconds)
    # Each unit is chosen after rounding, so 999.6 ms reads "1 s", never "1000 ms".
    if round(seconds * 1000) < 1000:
        return f"{round(seconds * 1000)} ms"
    if round(seconds, 2) < 10:
        return f"{seconds:.2f} s".replace(".00 s", " s")
    if round(seconds, 1) < MINUTE:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    whole = round(seconds)
    if whole < HOUR:
        return f"{whole // MINUTE} min {whole % MINUTE:02d} s"
    if whole < DAY:
        return f"{whole // HOUR} h {whole % HOUR // MINUTE:02d} min"
    return f"{whole // DAY} d {whole % DAY // HOUR:02d} h"


def duration_ms_text(milliseconds: float) -> str:
    return duration_text(milliseconds / 1000)


def moment_from_ms(milliseconds: int | float) -> datetime | None:
    """The UTC moment of a wall-clock reading in epoch milliseconds; None when out of range."""
    try:
        return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def relative_text(moment: datetime, now: datetime) -> str:
    """'just now', '42 s ago', '4 min ago', '3 h ago', '2 days ago', 'in 5 min'; past thirty days
    the date itself ('2026-11-02')."""
    delta = (now - moment).total_seconds()
    if abs(delta) >= RELATIVE_UNTIL:
        return moment.astimezone(UTC).strftime("%Y-%m-%d")
    span = abs(delta)
    if span < 5:
        return "just now"
    if span < MINUTE:
        words = f"{int(span)} s"
    elif span < HOUR:
        words = f"{int(span // MINUTE)} min"
    elif span < DAY:
        words = f"{int(span // HOUR)} h"
    else:
        days = int(span // DAY)
        words = f"{days} day{'s' if days != 1 else ''}"
    return f"{words} ago" if delta > 0 else f"in {words}"


def absolute_text(moment: datetime) -> str:
    """The full moment in UTC to the second, for a hover title (pages.js rewrites it in the
    reader's own time zone)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def offset_text(delta: timedelta) -> str:
    """A moment within a run, as its distance from the run's start: '+0 ms', '+4.2 s'."""
    return "+" + duration_text(delta.total_seconds()) if delta >= timedelta(0) else duration_text(delta.total_seconds())


# Units a person may type for a duration or a size (a setting's form), in milliseconds or bytes.
DURATION_UNITS = {"d": 86_400_000, "h": 3_600_000, "min": 60_000, "s": 1000, "ms": 1}
SIZE_UNITS = {"gb": 1024**3, "mb": 1024**2, "kb": 1024, "bytes": 1, "b": 1}
_AMOUNT = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)")


def _parse(text: str, units: dict[str, int], bare: int) -> int:
    """'1 h 30 min' → 5_400_000 with DURATION_UNITS; a bare number counts in `bare`. ValueError
    naming what was not understood."""
    total, position, text = 0.0, 0, text.strip()
    if not text:
        raise ValueError("it is empty")
    while position < len(text):
        match = _AMOUNT.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"“{text[position:].strip()}” is not an amount with a unit")
        amount, unit = float(match.group(1)), match.group(2).lower()
        if unit and unit not in units:
            raise ValueError(f"“{unit}” is not one of {', '.join(units)}")
        total += amount * (units[unit] if unit else bare)
        position = match.end()
    if not abs(total) < 2**63:  # what PostgreSQL's bigint holds (and no infinity)
        raise ValueError("it is too large")
    return round(total)


def parse_duration_ms(text: str) -> int:
    """'7 d', '12 h', '1 h 30 min', '45 s', '500 ms' in milliseconds; a bare number is milliseconds."""
    return _parse(text, DURATION_UNITS, bare=1)


def parse_size(text: str) -> int:
    """'512 KB', '10 MB', '1 GB', '300 bytes' in bytes (1 KB = 1024 bytes); a bare number is bytes."""
    return _parse(text, SIZE_UNITS, bare=1)


def duration_exact_text(milliseconds: int) -> str:
    """Every unit that is not zero, so the text reads back to the same number: '1 d 2 h 30 min'."""
    if milliseconds <= 0:
        return f"{milliseconds} ms"
    parts, rest = [], milliseconds
    for unit, size in DURATION_UNITS.items():
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts)


def size_exact_text(size: int) -> str:
    """The largest unit that holds the size whole: '10 MB', '1536 KB', '1000 bytes'."""
    for unit, factor in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size > 0 and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"
