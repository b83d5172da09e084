from django.http import HttpRequest

from ledger.selectors import inbox_count


def inbox(request: HttpRequest) -> dict[str, object]:
    """The open-ask count behind the badge on every page (one COUNT, only for signed-in users)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"inbox_count": inbox_count(user=request.user)}
