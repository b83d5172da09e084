"""The ingestion hot path, compiled to C with mypyc where a C compiler and Python's headers are at
hand (`make install` runs `python -m footprint_site.compiled`).

The modules in HOT_PATH run once per ingested event; compiled, the web workers spend about a
fifth less CPU per event (bench/ingest.py). The Python source stays the one truth: the compiled
copies are built from it, never committed, and Python imports a compiled copy in preference to
its source, so a copy older than its source stops the server (settings) instead of running code
that is no longer there. Without a compiler the source runs as it is: same behaviour, slower.
"""

import importlib.machinery
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOT_PATH = (
    "ledger/ingest/envelopes.py",
    "ledger/ingest/projections.py",
    "ledger/ingest/runs.py",
    "ledger/ingest/services.py",
    "ledger/otlp/rows.py",
    "ledger/otlp/services.py",
    "ledger/otlp/wire.py",
    "footprint_site/lib/chain.py",
    "footprint_site/lib/ids.py",
    "footprint_site/lib/jsonbody.py",
)
# mypyc puts what the modules share in one library, named after this; inside a package, so that
# it imports wherever the packages do (the editable install maps packages, not the project root).
GROUP = "ledger.compiled_hot_path"


def compiled_copies(source: Path) -> list[Path]:
    """The compiled copies of a module that Python would import instead of its source."""
    stem = source.with_suffix("")
    return [copy for suffix in importlib.machinery.EXTENSION_SUFFIXES if (copy := Path(f"{stem}{suffix}")).exists()]


def stale_copies(root: Path = ROOT) -> list[Path]:
    """Compiled copies older than their source."""
    return [
        copy
        for module in HOT_PATH
        for copy in compiled_copies(root / module)
        if copy.stat().st_mtime < (root / module).stat().st_mtime
    ]


def refuse_stale_copies(root: Path = ROOT) -> None:
    if stale := stale_copies(root):
        from django.core.exceptions import ImproperlyConfigured

        names = ", ".join(str(copy.relative_to(root)) for copy in stale)
        raise ImproperlyConfigured(
            f"{names}: compiled before its source last changed, and Python would run the compiled copy. "
            "Run `make install` to compile the hot path again (or delete the copies to run the source)."
        )


def _shared_libraries(root: Path) -> list[Path]:
    shared = root / Path(*GROUP.split("."))
    return list(shared.parent.glob(f"{shared.name}__mypyc.*"))


def is_compiled(root: Path = ROOT) -> bool:
    return (
        all(compiled_copies(root / module) for module in HOT_PATH)
        and bool(_shared_libraries(root))
        and not stale_copies(root)
    )


def _remove_copies(root: Path) -> None:
    for module in HOT_PATH:
        for copy in compiled_copies(root / module):
            copy.unlink()
    for library in _shared_libraries(root):
        library.unlink()


def _compile(root: Path) -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    # mypy's Django plugin reads the settings while it type-checks: any values do.
    os.environ.setdefault("DJANGO_SECRET_KEY", "compile-only")
    os.environ.setdefault("DATABASE_URL", "postgres://compile-only@localhost/compile-only")
    with tempfile.TemporaryDirectory() as work, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools' notes on pyproject.toml are not the user's concern here
        os.chdir(root)
        setup(
            name="footprint-hot-path",
            ext_modules=mypycify(list(HOT_PATH), group_name=GROUP, target_dir=f"{work}/c"),
            script_args=["--quiet", "build_ext", "--inplace", "--build-temp", f"{work}/temp"],
        )


def main() -> int:
    if is_compiled():
        return 0
    _remove_copies(ROOT)  # never leave a stale copy behind, even when compiling fails below
    print("Compiling the ingestion hot path with mypyc (once; again when its source changes)…", flush=True)
    try:
        _compile(ROOT)
    except (Exception, SystemExit) as error:  # setuptools reports a missing compiler by SystemExit
        _remove_copies(ROOT)
        print(
            f"Not compiled ({error}). The hot path runs as plain Python: same behaviour, about a fifth "
            "more web CPU per ingested event. A C compiler and Python's headers (Debian: gcc, python3-dev) "
            "let `make install` compile it.",
            file=sys.stderr,
        )
    finally:
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
