from django.urls import path

from ledger.audits import views

app_name = "audits"

urlpatterns = [
    path("audit-bundles/", views.bundle_list, name="bundle-list"),
    path("audit-bundles/<int:bundle_id>/", views.bundle_detail, name="bundle-detail"),
    path("projects/<slug:project_slug>/runs/<str:run_id>/audit-bundle/", views.run_audit_bundle, name="run-bundle"),
]
