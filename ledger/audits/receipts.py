"""Signed ingestion receipts: what closes the gap between two anchors.

An anchor vouches for the heads it signed; records stored after it and cut off before the next
one would leave no trace in the database. But every batch's answer already told the agent its
run's head: signed, with the record count, the receipt is the agent's own proof of what the
server stored. Held against the chain later, a receipt whose head the chain no longer reaches
shows the records removed after it, whenever that happened.

  signature = HMAC-SHA256 keyed by FOOTPRINT_ANCHOR_KEY (Django's salted HMAC) over
              JSON [project slug, run id, records, head hex]
"""

import hmac

import orjson
from django.conf import settings
from django.utils.crypto import salted_hmac

_SALT = "footprint.ledger.receipt"


def receipt_signature(*, project_slug: str, run_id: str, records: int, head_hex: str) -> str:
    message = orjson.dumps([project_slug, run_id, records, head_hex])
    return salted_hmac(_SALT, message, secret=settings.FOOTPRINT_ANCHOR_KEY, algorithm="sha256").hexdigest()


def receipt_signature_matches(*, project_slug: str, run_id: str, records: int, head_hex: str, signature: str) -> bool:
    expected = receipt_signature(project_slug=project_slug, run_id=run_id, records=records, head_hex=head_hex)
    return hmac.compare_digest(expected, signature)
