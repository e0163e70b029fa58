"""The example's one model: a member, welcomed by a job."""

from __future__ import annotations

from django.db import models


class Member(models.Model):
    email = models.EmailField(unique=True)
    welcomed_at = models.DateTimeField(null=True)

    class Meta:
        app_label = "django_app"
