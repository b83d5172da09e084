"""docs/architecture.md's map matches the tree: every module it names exists, and every room (an
app, or a package inside one) is on the map."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
APPS = ("footprint_site", "tenancy", "ledger", "artifacts")


def test_every_module_the_map_names_exists() -> None:
    apps = "|".join(APPS)
    named = set(re.findall(rf"`((?:{apps})/[\w/]+(?:\.py)?/?)`", DOC))
    assert named, "the map names no module: the pattern no longer matches the document"
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/architecture.md names what the tree does not have: {missing}"


def test_every_room_is_on_the_map() -> None:
    rooms = [*APPS] + [
        f"{app}/{child.name}"
        for app in APPS
        for child in sorted((ROOT / app).iterdir())
        if (child / "__init__.py").exists() and child.name not in ("migrations", "management", "templatetags")
    ]
    listed: set[str] = set()
    parent = ""
    for line in DOC.split("```")[1].splitlines():  # the tree: a room indented under its app
        if not line.strip():
            continue
        name = line.split()[0].rstrip("/")
        if line.startswith(" "):
            listed.add(f"{parent}/{name}")
        else:
            parent = name
            listed.add(name)
    missing = [room for room in rooms if room not in listed]
    assert not missing, f"rooms missing from the map in docs/architecture.md: {missing}"
