from django.urls import path

from webapp.sweeps.consumers import SweepConsumer

websocket_urlpatterns = [
    path("ws/sweeps/<int:sweep_id>/", SweepConsumer.as_asgi()),
]
