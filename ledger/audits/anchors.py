"""Signed checkpoints of chain heads ("anchors"): the digest and its signature. Pure functions.

  digest = SHA-256("afp-anchor/2\n" + project + "\n" + number + "\n" + prev_digest_hex + "\n"
                   + for each head sorted by run id: JSON [run_id, length, head_hex] + "\n")
  signature = HMAC-SHA256 keyed by FOOTPRINT_ANCHOR_KEY (Django's salted HMAC)

The key is configuration, never stored in the database: whoever can edit rows cannot re-sign.
Anchors written before format 2 wrote each head as run_id + TAB + length + TAB + head_hex: a run
id may hold a tab or a newline, so two heads could be rewritten as one with the same text.
JSON escapes both, so format 2 reads back as exactly one list of heads.
"""

import hashlib
import hmac

import orjson
from django.conf import settings
from django.utils.crypto import salted_hmac

_SALT = "footprint.ledger.anchor"
DIGEST_FORMAT = 2
Head = tuple[str, int, bytes]


def anchor_digest(
    *, project_slug: str, number: int, prev_digest: bytes, heads: list[Head], digest_format: int = DIGEST_FORMAT
) -> bytes:
    digest = hashlib.sha256(f"afp-anchor/{digest_format}\n{project_slug}\n{number}\n{prev_digest.hex()}\n".encode())
    for run_id, length, head in sorted(heads):
        if digest_format == 1:
            digest.update(f"{run_id}\t{length}\t{head.hex()}\n".encode())
        else:
            digest.update(orjson.dumps([run_id, length, head.hex()]) + b"\n")
    return digest.digest()


def heads_ambiguous(heads: list[Head], digest_format: int) -> bool:
    """Whether a format-1 digest could cover other heads than these (a run id with a tab or newline)."""
    return digest_format == 1 and any("\t" in run_id or "\n" in run_id for run_id, _, _ in heads)


def sign(digest: bytes) -> bytes:
    return salted_hmac(_SALT, digest, secret=settings.FOOTPRINT_ANCHOR_KEY, algorithm="sha256").digest()


def signature_matches(digest: bytes, signature: bytes) -> bool:
    return hmac.compare_digest(sign(digest), signature)
