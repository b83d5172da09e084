from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from ledger.asks.selectors import INBOX_COUNT_CAP, inbox_count


def inbox(request: HttpRequest) -> dict[str, object]:
    """The open-ask count behind the badge on every page: one COUNT, only for signed-in users, and
    only when a template shows it (htmx fragments without the badge never pay for it)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    user = request.user

    def badge() -> str:
        count = inbox_count(user=user)
        return f"{INBOX_COUNT_CAP - 1}+" if count >= INBOX_COUNT_CAP else str(count)

    return {"inbox_badge": SimpleLazyObject(badge)}
