from django.urls import path

from ledger.asks import views

app_name = "asks"

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("asks/<int:ask_id>/", views.ask_detail, name="ask-detail"),
    path("asks/<int:ask_id>/decide/", views.ask_decide, name="ask-decide"),
]
