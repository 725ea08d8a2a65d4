from django.urls import path

from webapp.experiments import views

app_name = "experiments"

urlpatterns = [
    path("<int:experiment_id>/", views.experiment_detail, name="detail"),
]
