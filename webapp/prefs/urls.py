from django.urls import path

from webapp.prefs import views

app_name = "prefs"

urlpatterns = [
    path("prefs/<str:key>", views.preference, name="preference"),
]
