from django.urls import path

from webapp.sweeps import views

app_name = "sweeps"

urlpatterns = [
    path("<int:sweep_id>/", views.sweep_detail, name="detail"),
    path("<int:sweep_id>/data.json", views.sweep_data, name="data"),
    path("<int:sweep_id>/cancel", views.sweep_cancel_view, name="cancel"),
]
