from django.urls import path

from webapp.manual import views

app_name = "manual"

urlpatterns = [
    path("", views.manual, name="index"),
    path("<path:path>", views.manual, name="page"),
]
