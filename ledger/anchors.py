"""Signed checkpoints of chain heads ("anchors"): the digest and its signature. Pure functions.

  digest = SHA-256("afp-anchor/1\n" + project + "\n" + number + "\n" + prev_digest_hex + "\n"
                   + for each head sorted by run id: run_id + "\t" + length + "\t" + head_hex + "\n")
  signature = HMAC-SHA256 keyed by FOOTPRINT_ANCHOR_KEY (Django's salted HMAC)

The key is configuration, never stored in the database: whoever can edit rows cannot re-sign.
"""

import hashlib
import hmac

from django.conf import settings
from django.utils.crypto import salted_hmac

_SALT = "footprint.ledger.anchor"


def anchor_digest(*, project_slug: str, number: int, prev_digest: bytes, heads: list[tuple[str, int, bytes]]) -> bytes:
    digest = hashlib.sha256(f"afp-anchor/1\n{project_slug}\n{number}\n{prev_digest.hex()}\n".encode())
    for run_id, length, head in sorted(heads):
        digest.update(f"{run_id}\t{length}\t{head.hex()}\n".encode())
    return digest.digest()


def sign(digest: bytes) -> bytes:
    return salted_hmac(_SALT, digest, secret=settings.FOOTPRINT_ANCHOR_KEY, algorithm="sha256").digest()


def signature_matches(digest: bytes, signature: bytes) -> bool:
    return hmac.compare_digest(sign(digest), signature)
