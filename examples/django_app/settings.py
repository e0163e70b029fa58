"""Settings of the example project: one app, one database, no middleware.

`DATABASE_URL` is this project's own setting, read by `jobs.py` as well, so the queue's table is
in the database Django writes the members to.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

import django

DATABASE_URL = os.environ.get("DJANGO_APP_DATABASE_URL", "sqlite:///django_app.db")


def _database(url: str) -> dict[str, str]:
    if url.startswith("sqlite:///"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {"default": _database(DATABASE_URL)}
INSTALLED_APPS = ["examples.django_app"]
ROOT_URLCONF = "examples.django_app.urls"
MIDDLEWARE: list[str] = []
SECRET_KEY = os.environ.get("DJANGO_APP_SECRET_KEY", "an example, not a secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MAIL_BACKEND = os.environ.get(
    "DJANGO_APP_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
)
if django.VERSION >= (6, 1):  # Django 6.1 names its mail backends in MAILERS (EMAIL_BACKEND warns)
    MAILERS = {"default": {"BACKEND": MAIL_BACKEND}}
else:
    EMAIL_BACKEND = MAIL_BACKEND
DEFAULT_FROM_EMAIL = "welcome@example.com"
