"""Date-times PostgreSQL can hold: converted to UTC, years 1 to 9999.

Python accepts UTC offsets up to ±23:59 and dates near its limits; PostgreSQL refuses offsets
beyond ±15:59 and times that fall outside its range after conversion. Converting here, where
input is parsed, turns those into a clear refusal instead of a database error.
"""

from datetime import UTC, datetime


def to_utc(moment: datetime) -> datetime:
    """The same instant in UTC; ValueError (naming the reason) when it cannot be stored."""
    if moment.tzinfo is None:
        raise ValueError("a date-time needs a time zone, e.g. 2026-12-01T09:00:00Z")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("the date-time falls outside the years 1 to 9999 in UTC") from None


def iso_z(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None
