from django.urls import path

from webapp.people import views

app_name = "people"

urlpatterns = [
    path("", views.people_page, name="list"),
    path("<int:user_id>/", views.person_page, name="detail"),
]
