"""The sign-in page, refusing an address after as many failed sign-ins as failed agent keys."""

from typing import Any

from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse

from footprint_site.auth import AuthThrottled, client_address, record_failure, refuse_if_throttled


class ThrottledLoginView(LoginView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            refuse_if_throttled(client_address(request))
        except AuthThrottled as exc:
            response = self.render_to_response(self.get_context_data(retry_after=exc.retry_after), status=429)
            response["Retry-After"] = str(exc.retry_after)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        record_failure(client_address(self.request))
        return super().form_invalid(form)
