from django.urls import path

from ledger.overview import views

app_name = "overview"

urlpatterns = [
    path("", views.overview, name="overview"),
]
