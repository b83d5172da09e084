"""Durations for people."""


def human_ms(ms: float) -> str:
    """A duration in milliseconds as people read it: '840 ms', '12.4 s', '3.2 min', '1.5 h'."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.3g} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.3g} min"
    return f"{ms / 3_600_000:.3g} h"
