"""The framework's published wire strings of its typed tool-result shapes (`canonical-notes.json`).

The file is the framework's own, copied unchanged (its version is in the file name): the notes,
markers and heading are read from it, never retyped, so a new release is a new file, not an edit.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

VERSION = "9.70.0"
PATH = Path(__file__).resolve().parent / f"canonical-notes-{VERSION}.json"


@dataclass(frozen=True)
class CanonicalNotes:
    version: str
    absence_note: str
    coverage_note: str
    semantics_note: str
    absence_marker: str
    coverage_marker: str
    semantics_marker: str
    coverage_heading: str


@cache
def canonical_notes() -> CanonicalNotes:
    """The strings, loaded once per process. A file missing a key fails loudly here."""
    data = json.loads(PATH.read_text(encoding="utf-8"))
    notes, markers, headings = data["notes"], data["markers"], data["headings"]
    return CanonicalNotes(
        version=VERSION,
        absence_note=notes["ABSENCE_NOTE"],
        coverage_note=notes["COVERAGE_NOTE"],
        semantics_note=notes["SEMANTICS_NOTE"],
        absence_marker=markers["ABSENCE_MARKER"],
        coverage_marker=markers["COVERAGE_MARKER"],
        semantics_marker=markers["SEMANTICS_MARKER"],
        coverage_heading=headings["COVERAGE_BLOCK_HEADING"],
    )
