from django.urls import path

from ledger import views_audits

app_name = "audits"

urlpatterns = [
    path("audit-bundles/", views_audits.bundle_list, name="bundle-list"),
    path("audit-bundles/<int:bundle_id>/", views_audits.bundle_detail, name="bundle-detail"),
]
