import re
import secrets
import string

REF_ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits
REF_PATTERN = re.compile(r"art_[A-Za-z0-9]{22}")


def mint_ref() -> str:
    return "art_" + "".join(secrets.choice(REF_ALPHABET) for _ in range(22))


def is_ref(value: object) -> bool:
    """Only the grammar recognizes a ref (fullmatch: `$` would accept a trailing newline)."""
    return isinstance(value, str) and REF_PATTERN.fullmatch(value) is not None
