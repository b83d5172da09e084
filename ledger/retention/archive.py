"""Where removed runs' archives are kept: ARCHIVE_URL, a directory (`file:///path`; by default
`archive/` in the data directory).

An archive is written whole or not at all (a temporary file, flushed to disk, then renamed into
place, the directory flushed too), then read back: the caller compares what is on disk with the
digest it computed before it removes anything.
"""

import hashlib
import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class ArchiveUnavailable(Exception):
    """The archive store could not take or give back an archive; `str()` says why, in a sentence."""


def archive_root() -> Path:
    url = urlparse(settings.ARCHIVE_URL)
    if url.scheme != "file" or url.netloc not in ("", "localhost"):
        raise ImproperlyConfigured(f"ARCHIVE_URL={settings.ARCHIVE_URL!r}: give a directory as file:///absolute/path.")
    return Path(unquote(url.path))


def archive_name(*, project_slug: str, run_id: str, chain_length: int) -> str:
    """A run id may hold any character but '/' and NUL, and be longer than a file name may: the
    file is named by its digest (the bundle inside names the run)."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()
    return f"{project_slug}/{digest[:2]}/{digest}-{chain_length}.audit.json"


def archive_put(name: str, body: bytes) -> str:
    """Write `body` as `name`; returns where it went, as a URL."""
    path = archive_root() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".incoming-", delete=False) as incoming:
            try:
                incoming.write(body)
                incoming.flush()
                os.fsync(incoming.fileno())
            except BaseException:
                os.unlink(incoming.name)
                raise
        os.replace(incoming.name, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as exc:
        raise ArchiveUnavailable(f"The archive {path} could not be written: {exc.strerror or exc}.") from exc
    return path.as_uri()


def archive_get(location: str) -> bytes:
    url = urlparse(location)
    path = Path(unquote(url.path))
    root = archive_root()
    if url.scheme != "file" or not path.is_relative_to(root):
        raise ArchiveUnavailable(f"The archive {location} is not in the configured store ({root.as_uri()}).")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ArchiveUnavailable(f"The archive {location} could not be read: {exc.strerror or exc}.") from exc
