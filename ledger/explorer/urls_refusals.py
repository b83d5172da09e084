from django.urls import path

from ledger.explorer import views_refusals

app_name = "refusals"

urlpatterns = [
    path("refusals/", views_refusals.refusal_list, name="refusal-list"),
    path("refusals/<int:refusal_id>/", views_refusals.refusal_detail, name="refusal-detail"),
]
