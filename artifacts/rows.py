"""Model instances from rows of raw SELECTs, converted field by field as the ORM converts them.

The agents' read path (the store, then one artifact) issues fixed statements whose building
through the ORM costs several times the query itself; `RowShape` keeps the instances those reads
return indistinguishable from a queryset's with `.only(*names)`: those fields loaded, the rest
deferred, and `prepared_cursor` runs the statements prepared.
"""

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model
from django.db.models.expressions import Col
from psycopg import Cursor

M = TypeVar("M", bound=Model)


class RowShape(Generic[M]):
    """The columns `names` of `model` as a SELECT list, and the instance a row of them makes."""

    def __init__(self, model: type[M], names: Sequence[str]) -> None:
        wanted = {model._meta.get_field(name).attname for name in names}  # type: ignore[union-attr]
        # Model.from_db takes the values in the model's field order, whatever order names were given in.
        self.fields: list[Field[Any, Any]] = [f for f in model._meta.concrete_fields if f.attname in wanted]
        self.model = model
        self.attnames = [f.attname for f in self.fields]
        self.columns = ", ".join(f'"{model._meta.db_table}"."{f.column}"' for f in self.fields)

    @cached_property
    def _converters(self) -> list[tuple[int, Col, list[Callable[..., Any]]]]:
        """What SQLCompiler.get_converters would find for these columns (e.g. JSONField decodes jsonb text)."""
        found = []
        for index, field in enumerate(self.fields):
            column = field.get_col(self.model._meta.db_table)
            converters = [*connection.ops.get_db_converters(column), *column.get_db_converters(connection)]
            if converters:
                found.append((index, column, converters))
        return found

    def instance(self, row: Sequence[Any]) -> M:
        """The instance loaded from the row's first len(fields) values, in `columns` order."""
        values = list(row[: len(self.fields)])
        for index, column, converters in self._converters:
            for convert in converters:
                values[index] = convert(values[index], column, connection)
        return self.model.from_db(connection.alias, self.attnames, values)


def prepared_cursor() -> CursorWrapper:
    """A cursor for the read path's fixed statements that binds their parameters on the server, so
    psycopg prepares each one after a few runs on a connection (settings: prepare_threshold) and
    PostgreSQL stops planning it on every request. Django's own cursors bind on the client, which
    cannot be prepared; planning the get's payload lookup across the daily partitions cost more
    than running it (p50 1.6-1.9 ms a call, 0.43 ms prepared). Otherwise as `connection.cursor()`:
    the same health check, and database errors translated to Django's.
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    # Never Django's debug wrapper: psycopg keeps no query text for a prepared statement, so DEBUG
    # logs and CaptureQueriesContext would record None. Execute wrappers see every statement.
    return CursorWrapper(Cursor(connection.connection), connection)
