"""Durations, moments and sizes as pages show them (footprint_site.lib.durations and the `when`,
`when_ms`, `duration` and `duration_ms` filters every template has)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from footprint_site.lib import durations

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 ms"),
        (0.0004, "0 ms"),
        (0.85, "850 ms"),
        (0.9996, "1 s"),
        (1, "1 s"),
        (4.2, "4.20 s"),
        (12.34, "12.3 s"),
        (59.96, "1 min 00 s"),
        (60, "1 min 00 s"),
        (245, "4 min 05 s"),
        (7380, "2 h 03 min"),
        (3 * 86400 + 4 * 3600, "3 d 04 h"),
        (-0.5, "-500 ms"),
    ],
)
def test_duration_text_reads_in_ms_s_min_and_h(seconds: float, text: str) -> None:
    assert durations.duration_text(seconds) == text


@pytest.mark.parametrize(
    ("ago", "text"),
    [
        (timedelta(seconds=2), "just now"),
        (timedelta(seconds=42), "42 s ago"),
        (timedelta(minutes=4, seconds=59), "4 min ago"),
        (timedelta(hours=3, minutes=10), "3 h ago"),
        (timedelta(days=1, hours=1), "1 day ago"),
        (timedelta(days=12), "12 days ago"),
        (-timedelta(minutes=5), "in 5 min"),
        (timedelta(days=45), "2026-10-22"),
    ],
)
def test_relative_text_says_how_long_ago_then_the_date(ago: timedelta, text: str) -> None:
    assert durations.relative_text(NOW - ago, NOW) == text


def test_moment_from_ms_refuses_what_no_calendar_holds() -> None:
    assert durations.moment_from_ms(1_796_043_009_968) == datetime(2026, 11, 30, 12, 50, 9, 968000, tzinfo=UTC)
    assert durations.moment_from_ms(10**20) is None


def _render(source: str, **context: object) -> str:
    return Template(source).render(Context(context))


def test_when_is_a_time_element_with_the_absolute_moment_on_hover() -> None:
    moment = timezone.now() - timedelta(minutes=4, seconds=10)

    html = _render("{{ moment|when }}", moment=moment)

    assert html == (
        f'<time datetime="{moment.isoformat()}" title="{moment.strftime("%Y-%m-%d %H:%M:%S")} UTC" data-when>'
        "4 min ago</time>"
    )


def test_when_of_nothing_says_so() -> None:
    assert _render("{{ moment|when }}", moment=None) == "—"
    assert _render('{{ moment|when:"never" }}', moment=None) == "never"


def test_when_ms_turns_a_wall_clock_reading_into_a_moment_never_a_number() -> None:
    html = _render("{{ ms|when_ms }}", ms=1_796_043_009_968)

    assert "1796043009968" not in html
    assert 'datetime="2026-11-30T12:50:09.968000+00:00"' in html
    assert _render("{{ ms|when_ms }}", ms=None) == "—"
    assert _render("{{ ms|when_ms }}", ms=10**20) == "—"


def test_duration_filters_take_a_timedelta_or_milliseconds() -> None:
    assert _render("{{ d|duration }}", d=timedelta(milliseconds=1250)) == "1.25 s"
    assert _render("{{ ms|duration_ms }}", ms=191) == "191 ms"
    assert _render("{{ ms|duration_ms }}", ms=604_800_000) == "7 d 00 h"
    assert _render("{{ ms|duration_ms }}", ms=None) == "—"


def test_sizes_read_in_kb_and_mb() -> None:
    assert _render("{{ n|filesizeformat }}", n=1536) == "1.5\xa0KB"
    assert _render("{{ n|filesizeformat }}", n=3 * 1024 * 1024) == "3.0\xa0MB"


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [("7 d", 604_800_000), ("12h", 43_200_000), ("1 h 30 min", 5_400_000), ("1.5 s", 1500), ("60000", 60_000)],
)
def test_a_duration_is_typed_with_its_unit(text: str, milliseconds: int) -> None:
    assert durations.parse_duration_ms(text) == milliseconds
    assert durations.parse_duration_ms(durations.duration_exact_text(milliseconds)) == milliseconds


@pytest.mark.parametrize(("text", "problem"), [("7 weeks", "“weeks” is not one of"), ("soon", "is not an amount")])
def test_a_duration_not_understood_says_what(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        durations.parse_duration_ms(text)


def test_a_size_is_typed_in_kb_or_mb_and_shown_back_exactly() -> None:
    assert durations.parse_size("10 MB") == 10 * 1024 * 1024
    assert durations.parse_size("512 kb") == 512 * 1024
    assert durations.size_exact_text(1536 * 1024) == "1536 KB"
    assert durations.size_exact_text(1000) == "1000 bytes"
    with pytest.raises(ValueError, match="too large"):
        durations.parse_size("99999999999 GB")
