"""The queue for a worker process, with Django set up first:

nilo-job worker examples.django_app.worker:jobs
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
django.setup()

from .jobs import jobs  # noqa: E402  (Django must be set up before the models are imported)

__all__ = ["jobs"]
