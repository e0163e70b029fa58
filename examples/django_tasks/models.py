"""The example's one model: an order, confirmed by a task."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    confirmed_at = models.DateTimeField(null=True)

    class Meta:
        app_label = "django_tasks"
