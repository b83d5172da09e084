"""The compiled copies of the ingestion hot path never run in place of a newer source."""

import importlib.machinery
import os
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from footprint_site.compiled import HOT_PATH, refuse_stale_copies, stale_copies

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _module_with_copy(root: Path, module: str, copy_age: float) -> Path:
    source = root / module
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("VALUE = 1\n")
    copy = source.with_suffix(SUFFIX)
    copy.write_bytes(b"compiled")
    mtime = source.stat().st_mtime
    os.utime(copy, (mtime + copy_age, mtime + copy_age))
    return copy


def test_a_copy_built_after_its_source_is_current(tmp_path: Path) -> None:
    _module_with_copy(tmp_path, HOT_PATH[0], copy_age=+5)
    assert stale_copies(tmp_path) == []
    refuse_stale_copies(tmp_path)


def test_a_copy_older_than_its_source_stops_the_server_with_what_to_do(tmp_path: Path) -> None:
    copy = _module_with_copy(tmp_path, HOT_PATH[1], copy_age=-5)
    assert stale_copies(tmp_path) == [copy]
    stale = r"ledger/ingest/projections\..*compiled before its source.*make install"
    with pytest.raises(ImproperlyConfigured, match=stale):
        refuse_stale_copies(tmp_path)


def test_no_copies_is_the_plain_source(tmp_path: Path) -> None:
    (tmp_path / HOT_PATH[0]).parent.mkdir(parents=True)
    (tmp_path / HOT_PATH[0]).write_text("VALUE = 1\n")
    assert stale_copies(tmp_path) == []


def test_what_runs_is_what_was_compiled() -> None:
    # Compiled (make install found a C compiler): every hot-path module imports as its compiled
    # copy, the shared library included. Not compiled: every one imports as its source.
    import footprint_site.lib.chain
    import footprint_site.lib.ids
    import footprint_site.lib.jsonbody
    import ledger.ingest.envelopes
    import ledger.ingest.projections
    import ledger.ingest.runs
    import ledger.ingest.services
    import ledger.otlp.rows
    import ledger.otlp.services
    import ledger.otlp.wire
    from footprint_site.compiled import is_compiled

    modules = (
        ledger.ingest.envelopes,
        ledger.ingest.projections,
        ledger.ingest.runs,
        ledger.ingest.services,
        ledger.otlp.rows,
        ledger.otlp.services,
        ledger.otlp.wire,
        footprint_site.lib.chain,
        footprint_site.lib.ids,
        footprint_site.lib.jsonbody,
    )
    assert len(modules) == len(HOT_PATH)
    compiled = [Path(module.__file__ or "").suffix != ".py" for module in modules]
    assert compiled == [is_compiled()] * len(HOT_PATH)
