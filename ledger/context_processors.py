from django.http import HttpRequest

from ledger.selectors import INBOX_COUNT_CAP, inbox_count


def inbox(request: HttpRequest) -> dict[str, object]:
    """The open-ask count behind the badge on every page (one COUNT, only for signed-in users)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    count = inbox_count(user=request.user)
    return {"inbox_count": count, "inbox_badge": f"{INBOX_COUNT_CAP - 1}+" if count >= INBOX_COUNT_CAP else str(count)}
