from django.urls import path

from ledger import views_asks

app_name = "asks"

urlpatterns = [
    path("inbox/", views_asks.inbox, name="inbox"),
    path("asks/<int:ask_id>/", views_asks.ask_detail, name="ask-detail"),
    path("asks/<int:ask_id>/decide/", views_asks.ask_decide, name="ask-decide"),
]
