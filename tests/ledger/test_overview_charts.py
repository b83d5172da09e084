"""The overview's charts as data: the links behind the marks, built without the page."""

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from django.template.defaultfilters import floatformat

from ledger.overview import charts
from ledger.templatetags import ledger_tags


def test_a_marks_link_carries_its_period_first_then_the_series_filters_encoded_as_urlencode_does() -> None:
    start = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
    end = start + timedelta(minutes=1)
    links = charts._refusals("Refusals (a&b)", category="a&b c/d?", project=None, tool="")
    link = links(start, end)
    expected = {"since": "2026-03-04T05:06:00Z", "until": "2026-03-04T05:07:00Z", "category": "a&b c/d?"}
    assert link.href == "/refusals/?" + urlencode(expected)
    assert parse_qsl(urlsplit(link.href).query) == list(expected.items())
    assert link.title == "Refusals (a&b), 04 Mar 05:06 to 05:07 UTC"
    assert (link.subject, link.start, link.end) == ("Refusals (a&b)", start, end)


def test_a_runs_ended_link_names_its_period_as_ended() -> None:
    start = datetime(2026, 3, 4, tzinfo=UTC)
    link = charts._runs_ended("Runs now failed", status="failed", project="acme")(start, start + timedelta(days=1))
    assert link.href == (
        "/runs/?ended_since=2026-03-04T00%3A00%3A00Z&ended_until=2026-03-05T00%3A00%3A00Z&status=failed&project=acme"
    )
    assert link.title == "Runs now failed, ended Wed 04 Mar"
    assert link.subject == "Runs now failed, ended"


AMOUNTS = [0.0, 0.01, 0.00005, 0.00015, 1e-05, 2.5e-05, 0.123449999, 12345.678949, 1e30, 1e190, 1.7e308, 1e-250]


@pytest.mark.parametrize("amount", [*AMOUNTS, float("inf")])
def test_a_usage_cost_reads_as_floatformat_4_writes_it(amount: float) -> None:
    assert ledger_tags._dollars(amount) == floatformat(amount, 4)
