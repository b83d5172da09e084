"""Times, durations and sizes for people, loaded on every template (settings TEMPLATES builtins).

`when` renders a moment as a <time> element: relative text ("4 min ago"), the ISO instant for
machines, and the absolute time on hover; static/js/pages.js rewrites that hover text in the
reader's own time zone. No page shows an epoch number or a bare count of milliseconds.
"""

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from footprint_site.lib import durations

register = template.Library()


@register.filter
def when(moment: datetime | None, empty: str = "—") -> SafeString | str:
    """<time datetime=… title=…>4 min ago</time>; `empty` when there is no moment."""
    if not isinstance(moment, datetime):
        return empty
    return format_html(
        '<time datetime="{}" title="{}" data-when>{}</time>',
        moment.isoformat(),
        durations.absolute_text(moment),
        durations.relative_text(moment, timezone.now()),
    )


@register.filter
def when_ms(milliseconds: int | float | None, empty: str = "—") -> SafeString | str:
    """`when` for a wall-clock reading the framework sent as epoch milliseconds."""
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, int | float):
        return empty
    moment = durations.moment_from_ms(milliseconds)
    return when(moment, empty) if moment else empty


@register.filter
def duration(value: timedelta | None) -> str:
    """'850 ms', '4.2 s', '4 min 05 s', '2 h 03 min'."""
    return durations.duration_text(value.total_seconds()) if isinstance(value, timedelta) else "—"


@register.filter
def duration_ms(milliseconds: int | float | None) -> str:
    """A duration the framework or a setting gives in milliseconds, in ms/s/min."""
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, int | float):
        return "—"
    return durations.duration_ms_text(milliseconds)
