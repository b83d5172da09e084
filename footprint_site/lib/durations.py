"""Durations, moments and sizes in the words people read on a page.

Framework-free and pure, so the pages, their tests and any later report format the same way:
milliseconds below a second, seconds with one decimal below a minute, then minutes and hours.
"""

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
