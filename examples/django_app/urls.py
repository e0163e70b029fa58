"""The example project's routes."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("members", views.join),
    path("members/<int:member_id>/remind", views.remind),
    path("jobs/<int:row_id>", views.cancel),
    path("ops/stats", views.stats),
]
