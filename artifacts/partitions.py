"""Daily partitions of `artifacts_payload`, named artifacts_payload_pYYYYMMDD."""

import time
from datetime import UTC, date, datetime, timedelta

from django.db import connection

FAR_BUCKET = date(9999, 12, 31)
DAYS_AHEAD = 40
PREFIX = "artifacts_payload_p"
_known: tuple[float, set[date]] = (0.0, set())


def day_of_ms(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).date()


def partition_name(day: date) -> str:
    return f"{PREFIX}{day:%Y%m%d}"


def ensure_partitions_sql(*, existing: set[date], today: date | None = None) -> list[str]:
    today = today or datetime.now(tz=UTC).date()
    statements = []
    for offset in range(DAYS_AHEAD + 1):
        day = today + timedelta(days=offset)
        if day not in existing:
            statements.append(
                f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF artifacts_payload "
                f"FOR VALUES FROM ('{day.isoformat()}') TO ('{(day + timedelta(days=1)).isoformat()}')"
            )
    return statements


def existing_partitions() -> set[date]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'artifacts_payload'"
        )
        names = [row[0] for row in cursor.fetchall()]
    return {date.fromisoformat(n.removeprefix(PREFIX)) for n in names if n.startswith(PREFIX)}


def bucket_for(expires_at: int | None) -> date:
    """The payload's partition day: its expiry day when that partition exists, else the far one."""
    global _known
    if expires_at is None:
        return FAR_BUCKET
    day = day_of_ms(expires_at)
    checked_at, known = _known
    if day not in known and time.monotonic() - checked_at > 30:
        _known = (time.monotonic(), existing_partitions())
        known = _known[1]
    return day if day in known else FAR_BUCKET
