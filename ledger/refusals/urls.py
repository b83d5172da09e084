from django.urls import path

from ledger.refusals import views

app_name = "refusals"

urlpatterns = [
    path("refusals/", views.refusal_list, name="refusal-list"),
    path("refusals/<int:refusal_id>/", views.refusal_detail, name="refusal-detail"),
]
