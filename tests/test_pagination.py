"""The keyset paginator every list, page and API reads its pages through, on real PostgreSQL rows."""

from typing import Any

import pytest
from django.db.models import QuerySet

from footprint_site.pagination import (
    Page,
    decode_cursor,
    encode_cursor,
    keyset_page,
    keyset_pages,
    page_of,
)
from tenancy.models import Project

pytestmark = pytest.mark.django_db


def _projects(n: int, prefix: str = "pg") -> list[Project]:
    return [Project.objects.create(slug=f"{prefix}-{i:03d}", name=f"{prefix} {i % 3}") for i in range(n)]


def _mine(prefix: str = "pg") -> QuerySet[Project]:
    return Project.objects.filter(slug__startswith=f"{prefix}-")


def _walk(queryset: QuerySet[Project], *, limit: int, **position: Any) -> list[list[int]]:
    """Every page's ids, following each page's opaque cursor to the end."""
    pages: list[list[int]] = []
    cursor: str | None = None
    while True:
        page = keyset_page(queryset, cursor=cursor, limit=limit, **position)
        pages.append([project.pk for project in page.items])
        if not page.has_more:
            return pages
        cursor = page.next_cursor


def test_descending_pages_newest_first_without_repeats_or_gaps() -> None:
    ids = [project.pk for project in _projects(7)]
    pages = _walk(_mine(), limit=3, order="-id")
    assert pages == [ids[::-1][:3], ids[::-1][3:6], ids[::-1][6:]]


def test_ascending_pages_by_a_key_the_url_carries_as_is() -> None:
    ids = [project.pk for project in _projects(5)]
    first = keyset_page(_mine(), order="id", after=0, limit=2)
    assert [p.pk for p in first.items] == ids[:2]
    assert first.next_after == ids[1]
    second = keyset_page(_mine(), order="id", after=first.next_after, limit=2)
    third = keyset_page(_mine(), order="id", after=second.next_after, limit=2)
    assert [p.pk for p in second.items + third.items] == ids[2:]
    assert third.next_after is None


def test_a_listing_that_is_an_exact_multiple_of_the_page_ends_without_an_empty_page() -> None:
    _projects(6)
    pages = _walk(_mine(), limit=3, order="-id")
    assert [len(page) for page in pages] == [3, 3]


def test_one_row_short_of_a_page_and_one_row_over() -> None:
    _projects(4)
    assert not keyset_page(_mine(), limit=4).has_more
    assert keyset_page(_mine(), limit=3).has_more


def test_an_empty_listing_is_one_empty_page() -> None:
    page = keyset_page(_mine(), limit=10)
    assert page == Page([], None)
    assert page.next_cursor is None


@pytest.mark.parametrize("cursor", ["", "!!!", "bm90LWEtbnVtYmVy", "%%", "__4"])
def test_an_undecodable_cursor_restarts_the_listing(cursor: str) -> None:
    ids = [project.pk for project in _projects(3)]
    page = keyset_page(_mine(), cursor=cursor, limit=10)
    assert [p.pk for p in page.items] == ids[::-1]


def test_cursors_keep_their_encoding() -> None:
    """Cursors already handed out (bookmarks, clients mid-walk) must still name the same row."""
    assert encode_cursor(1234) == "MTIzNA"
    assert decode_cursor("MTIzNA") == 1234
    projects = _projects(3)
    page = keyset_page(_mine(), limit=1)
    assert page.next_cursor == encode_cursor(projects[-1].pk)


def test_rows_inserted_between_pages_are_neither_repeated_nor_skipped() -> None:
    old = [project.pk for project in _projects(4)]
    first = keyset_page(_mine(), order="-id", limit=2)
    newer = _projects(2, prefix="pg-new")  # newer ids: on a first page fetched again, not the next one
    second = keyset_page(_mine(), order="-id", cursor=first.next_cursor, limit=2)
    assert [p.pk for p in first.items + second.items] == old[::-1]
    assert not second.has_more
    ascending = keyset_page(_mine(), order="id", after=old[-1], limit=10)
    assert [p.pk for p in ascending.items] == [p.pk for p in newer]


def test_a_composite_key_with_mixed_directions() -> None:
    projects = _projects(8)  # names repeat ("pg 0", "pg 1", "pg 2"); slugs break the ties
    expected = [p.pk for p in sorted(projects, key=lambda p: (p.name, [-ord(c) for c in p.slug]))]
    seen: list[int] = []
    after = None
    while True:
        page = keyset_page(_mine(), order=("name", "-slug"), after=after, limit=3)
        seen += [p.pk for p in page.items]
        if not page.has_more:
            break
        after = page.next_after
        assert isinstance(after, tuple)
        assert len(after) == 2
    assert seen == expected
    with pytest.raises(TypeError):
        _ = keyset_page(_mine(), order=("name", "-slug"), limit=3).next_cursor


def test_lists_paged_together_are_cut_where_the_first_was_cut() -> None:
    ids = [project.pk for project in _projects(6)]
    evens = _mine().filter(pk__in=ids[::2])
    odds = _mine().filter(pk__in=ids[1::2])
    (a, b), cut = keyset_pages([evens, odds], order="id", after=0, limit=2)
    assert cut == ids[2]
    assert [p.pk for p in a] == [ids[0], ids[2]]
    assert [p.pk for p in b] == [ids[1]]
    (a, b), cut = keyset_pages([evens, odds], order="id", after=cut, limit=2)
    assert cut is None
    assert sorted(p.pk for p in a + b) == ids[3:]


def test_page_of_rows_read_by_hand_and_a_bad_page_size() -> None:
    assert page_of([1, 2, 3], order="real", limit=3) == Page([1, 2, 3])
    with pytest.raises(ValueError, match="at least one row"):
        keyset_page(_mine(), limit=0)
    with pytest.raises(ValueError, match="not both"):
        keyset_page(_mine(), cursor="MQ", after=1, limit=1)


def test_one_query_per_page(django_assert_num_queries: Any) -> None:
    _projects(5)
    cursor = keyset_page(_mine(), limit=2).next_cursor
    with django_assert_num_queries(1):
        keyset_page(_mine(), cursor=cursor, limit=2)
