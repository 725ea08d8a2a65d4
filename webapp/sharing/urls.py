from django.urls import path

from webapp.sharing import views

app_name = "sharing"

urlpatterns = [
    path("", views.share_list, name="list"),
    path("new", views.share_new, name="new"),
    path("<int:link_id>/revoke", views.share_revoke, name="revoke"),
    path("<str:token>/", views.share_open, name="open"),
]
