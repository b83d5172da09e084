"""Print requirements-runtime.lock: the lines of requirements.lock the server itself runs on.

The image installs these alone (no pytest, Playwright, mypy or ruff). Read from the installed
distributions' own metadata, starting at this project's dependencies without its extras, so it
runs in any venv that holds the whole lock (`make lock` writes the file; a test checks it).
"""

import re
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "footprint-ledger"


def requirements_reached(extras: frozenset[str] = frozenset()) -> list[tuple[str, Requirement]]:
    """(who needs it, requirement) for every requirement reached from the project with `extras`,
    markers evaluated here, each requirement's own extras followed."""
    reached: list[tuple[str, Requirement]] = []
    pending, seen = [(PROJECT, extras)], set()
    while pending:
        name, wanted = pending.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        for line in distribution(name).requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": extra}) for extra in wanted or {""}):
                continue
            key = canonicalize_name(requirement.name)
            try:
                distribution(key)
            except PackageNotFoundError:
                sys.exit(f"{requirement.name} (needed by {name}) is not installed: install the whole lock first.")
            reached.append((name, requirement))
            pending.append((key, frozenset(requirement.extras)))
    return reached


def runtime_lock() -> str:
    needed = {canonicalize_name(requirement.name) for _, requirement in requirements_reached()}
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    kept = [line for line in lines if canonicalize_name(re.split(r"[=<>!~ ;\[]", line, maxsplit=1)[0]) in needed]
    header = "# The server's own dependencies, pinned as in requirements.lock (written by `make lock`)."
    return "\n".join([header, *kept]) + "\n"


if __name__ == "__main__":
    sys.stdout.write(runtime_lock())
