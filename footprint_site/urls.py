from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from footprint_site import errors
from footprint_site.api import api
from footprint_site.health import healthz
from footprint_site.sign_in import ThrottledLoginView
from ledger.otlp import views as otlp_views

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", errors.with_method_errors(api.urls)),
    path("v1/traces", errors.method_errors(otlp_views.export_traces), name="otlp-traces"),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("ledger.overview.urls")),
    path("", include("ledger.explorer.urls")),
    path("", include("artifacts.urls")),
    path("", include("ledger.asks.urls")),
    path("", include("ledger.refusals.urls")),
    path("", include("ledger.audits.urls")),
    path("", include("ledger.retention.urls")),
    path("", include("tenancy.urls")),
]

# Unknown paths, refusals and failures: `{error, code}` under /api/ and /v1/, pages elsewhere.
handler400 = errors.bad_request
handler403 = errors.permission_denied
handler404 = errors.not_found
handler500 = errors.server_error
