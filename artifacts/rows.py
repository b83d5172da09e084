"""Model instances from rows of raw SELECTs, converted field by field as the ORM converts them.

The agents' read path (the store, then one artifact) issues fixed statements whose building
through the ORM costs several times the query itself; `RowShape` keeps the instances those reads
return indistinguishable from a queryset's with `.only(*names)`: those fields loaded, the rest
deferred. They run through `footprint_site.lib.db.prepared_cursor`, prepared.
"""

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, Generic, TypeVar

from django.db import connection
from django.db.models import Field, Model
from django.db.models.expressions import Col

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
