"""Keyset pagination: a page ends at a row's key and the next page starts after it, so a listing
stays fast however deep it goes and never repeats or skips a row that was added meanwhile.

Every list, page and API reads its pages through `keyset_page` (or `keyset_pages` for lists shown
side by side under one cursor). A key is one or more unique-together fields, each ascending or
descending (`"-id"`, `"seq"`, `("-created_at", "ref")`). Where a URL carries the key as it is
(`?after_seq=41`) the caller passes `after=`; lists that hand out opaque cursors pass `cursor=`.
Readers that run their own keyset SQL (the run timeline) cut what they read with `page_of`.
"""

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import Model, Q, QuerySet

T = TypeVar("T")
U = TypeVar("U")
M = TypeVar("M", bound=Model)

Order = str | tuple[str, ...]


def encode_cursor(value: int | tuple[int, ...]) -> str:
    """An opaque cursor for a key of one integer, or of several (a composite key, joined by dots)."""
    text = ".".join(str(part) for part in value) if isinstance(value, tuple) else str(value)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, parts: int = 1) -> Any:
    """The key a cursor names: an integer, or a tuple of `parts` integers. An undecodable cursor,
    or one of another key's shape, restarts the listing rather than failing it."""
    if not cursor:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        values = tuple(int(part) for part in text.split("."))
    except ValueError:
        return None
    if len(values) != parts:
        return None
    return values[0] if parts == 1 else values


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of rows, and the key of its last row when another page follows (else None)."""

    items: list[T]
    next_after: Any = None

    @property
    def has_more(self) -> bool:
        return self.next_after is not None

    @property
    def next_cursor(self) -> str | None:
        """The opaque cursor of the next page, for a key of one integer or several."""
        if self.next_after is None:
            return None
        parts = self.next_after if isinstance(self.next_after, tuple) else (self.next_after,)
        if any(isinstance(part, bool) or not isinstance(part, int) for part in parts):
            raise TypeError("an opaque cursor encodes integer keys; encode any other key where it is read")
        return encode_cursor(self.next_after)

    def map(self, convert: Callable[[list[T]], list[U]]) -> "Page[U]":
        """The same page of other rows built from these (same order, same length)."""
        return Page(convert(self.items), self.next_after)


def _fields(order: Order) -> list[tuple[str, bool]]:
    """(field, descending) for each part of the key."""
    parts = (order,) if isinstance(order, str) else order
    if not parts:
        raise ValueError("a keyset needs at least one key field")
    return [(part.removeprefix("-"), part.startswith("-")) for part in parts]


def _key_of(row: Any, fields: list[tuple[str, bool]]) -> Any:
    key = tuple(getattr(row, name) for name, _ in fields)
    return key[0] if len(key) == 1 else key


def _after(fields: list[tuple[str, bool]], after: Any) -> Q:
    """Rows that come after the key `after` in this order: for (a desc, b asc) that is
    a < A, or a = A and b > B."""
    values = (after,) if len(fields) == 1 else tuple(after)
    if len(values) != len(fields):
        raise ValueError(f"a key of {len(fields)} fields was given {len(values)} values")
    condition = Q()
    for i, (name, descending) in enumerate(fields):
        same = {earlier: values[j] for j, (earlier, _) in enumerate(fields[:i])}
        condition |= Q(**same, **{f"{name}__{'lt' if descending else 'gt'}": values[i]})
    if len(fields) == 1:
        return condition
    # The same rows, with a bound on the first field the planner can start an index scan at: an OR
    # alone made it walk the index from the top and filter every row before the page.
    first, descending = fields[0]
    return Q(**{f"{first}__{'lte' if descending else 'gte'}": values[0]}) & condition


def page_of(rows: Sequence[T], *, order: Order, limit: int) -> Page[T]:
    """The page in `rows`, read in key order up to `limit + 1` past the previous page: the extra
    row only tells that another page follows. For readers that run their own keyset SQL."""
    fields = _fields(order)
    if len(rows) <= limit:
        return Page(list(rows))
    return Page(list(rows[:limit]), _key_of(rows[limit - 1], fields))


def keyset_page(
    queryset: QuerySet[M],
    *,
    order: Order = "-id",
    cursor: str | None = None,
    after: Any = None,
    limit: int,
) -> Page[M]:
    """Up to `limit` rows of `queryset` in key order, after `after` (a key value) or the row an
    opaque `cursor` names; from the first row when neither is given or the cursor is undecodable.
    One query: the `limit + 1`th row is read only to tell whether another page follows."""
    if limit < 1:
        raise ValueError(f"a page holds at least one row, not {limit}")
    if cursor is not None:
        if after is not None:
            raise ValueError("give a page's position as a cursor or as a key, not both")
        after = decode_cursor(cursor, parts=len(_fields(order)))
    fields = _fields(order)
    if after is not None:
        queryset = queryset.filter(_after(fields, after))
    parts = (order,) if isinstance(order, str) else order
    return page_of(list(queryset.order_by(*parts)[: limit + 1]), order=order, limit=limit)


def keyset_pages(
    querysets: Sequence[QuerySet[Any]], *, order: str, after: Any = None, limit: int
) -> tuple[list[list[Any]], Any]:
    """Several lists shown together under one position (a key of one field they share, e.g. a
    run's seq): each is read as by `keyset_page`, then all are cut where the first of them was cut,
    so the next page neither repeats nor skips a row of any. Returns the lists and the key the next
    page starts after (None on the last page)."""
    fields = _fields(order)
    if len(fields) != 1:
        raise ValueError("lists paged together share a key of one field")
    (name, descending), *_ = fields
    pages = [keyset_page(queryset, order=order, after=after, limit=limit) for queryset in querysets]
    cuts = [page.next_after for page in pages if page.next_after is not None]
    if not cuts:
        return [page.items for page in pages], None
    cut = max(cuts) if descending else min(cuts)

    def within(row: Any) -> bool:
        key = getattr(row, name)
        return key >= cut if descending else key <= cut

    return [[row for row in page.items if within(row)] for page in pages], cut
