from django.urls import path

from webapp.scheduling import views

app_name = "scheduling"

urlpatterns = [
    path("", views.queue_page, name="queue"),
    path("<int:run_id>/cancel", views.queue_cancel, name="cancel"),
    path("<int:run_id>/front", views.queue_front, name="front"),
]
