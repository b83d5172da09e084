"""The per-run hash chain: each link is SHA-256(previous hash || canonical event bytes).

Kept deliberately tiny so an auditor can re-implement it from this docstring alone:
  genesis = 32 zero bytes
  hash[i] = sha256(hash[i-1] + body[i].encode("utf-8"))
where body[i] is the stored canonical text of the i-th event in store order.
"""

import hashlib

GENESIS = bytes(32)


def link_hash(prev_hash: bytes, body: bytes) -> bytes:
    return hashlib.sha256(prev_hash + body).digest()
