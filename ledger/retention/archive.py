"""Where removed runs' archives are kept: ARCHIVE_URL, a directory (`file:///path`; by default
`archive/` in the data directory) or an S3-compatible bucket (`s3://bucket/prefix`, through boto3,
which takes its endpoint and credentials from the usual AWS_* variables).

An archive is written whole or not at all (in a directory: a temporary file, flushed to disk, then
renamed into place, the directory flushed too; in a bucket: one PUT that the store checks against
the SHA-256 sent with it), then read back: the caller compares what came back with the digest it
computed before it removes anything.
"""

import base64
import functools
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import ParseResult, unquote, urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class ArchiveUnavailable(Exception):
    """The archive store could not take or give back an archive; `str()` says why, in a sentence."""


def archive_name(*, project_slug: str, run_id: str, chain_length: int) -> str:
    """A run id may hold any character but '/' and NUL, and be longer than a file name may: the
    file is named by its digest (the bundle inside names the run)."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()
    return f"{project_slug}/{digest[:2]}/{digest}-{chain_length}.audit.json"


def archive_put(name: str, body: bytes) -> str:
    """Write `body` as `name`; returns where it went, as a URL."""
    url = _configured_store()
    if url.scheme == "s3":
        return _bucket_put(url.netloc, _bucket_key(url, name), body)
    return _directory_put(_directory(url) / name, body)


def archive_get(location: str) -> bytes:
    """The archive at `location`, which must lie in the configured store: a tombstone's location
    is never followed elsewhere."""
    store, url = _configured_store(), urlparse(location)
    if store.scheme == "s3":
        if (
            url.scheme != "s3"
            or url.netloc != store.netloc
            or not url.path.lstrip("/").startswith(_bucket_key(store, ""))
        ):
            raise ArchiveUnavailable(f"The archive {location} is not in the configured store ({settings.ARCHIVE_URL}).")
        return _bucket_get(url.netloc, url.path.lstrip("/"), location)
    root, path = _directory(store), Path(unquote(url.path))
    if url.scheme != "file" or not path.is_relative_to(root):
        raise ArchiveUnavailable(f"The archive {location} is not in the configured store ({root.as_uri()}).")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ArchiveUnavailable(f"The archive {location} could not be read: {exc.strerror or exc}.") from exc


def _configured_store() -> ParseResult:
    url = urlparse(settings.ARCHIVE_URL)
    if url.scheme == "s3" and url.netloc:
        return url
    if url.scheme == "file" and url.netloc in ("", "localhost"):
        return url
    raise ImproperlyConfigured(
        f"ARCHIVE_URL={settings.ARCHIVE_URL!r}: give a directory as file:///absolute/path "
        "or a bucket as s3://bucket/optional/prefix."
    )


def _directory(url: ParseResult) -> Path:
    return Path(unquote(url.path))


def _directory_put(path: Path, body: bytes) -> str:
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


def _bucket_key(url: ParseResult, name: str) -> str:
    prefix = url.path.strip("/")
    return f"{prefix}/{name}" if prefix else name


@functools.cache
def _bucket_client() -> Any:
    # One client per process (making one costs tens of milliseconds); bounded waits, so a store
    # that hangs fails the run's archiving with a sentence and the pass moves on.
    config = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.session.Session().client("s3", config=config)


def _bucket_put(bucket: str, key: str, body: bytes) -> str:
    location = f"s3://{bucket}/{key}"
    checksum = base64.b64encode(hashlib.sha256(body).digest()).decode()
    try:
        _bucket_client().put_object(Bucket=bucket, Key=key, Body=body, ChecksumSHA256=checksum)
    except (BotoCoreError, ClientError) as exc:
        raise ArchiveUnavailable(f"The archive {location} could not be written: {exc}.") from exc
    return location


def _bucket_get(bucket: str, key: str, location: str) -> bytes:
    try:
        return bytes(_bucket_client().get_object(Bucket=bucket, Key=key)["Body"].read())
    except (BotoCoreError, ClientError) as exc:
        raise ArchiveUnavailable(f"The archive {location} could not be read: {exc}.") from exc
