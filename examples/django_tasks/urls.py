"""The example project's routes."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("orders", views.place),
    path("tasks/<str:result_id>", views.result),
]
