"""The example project's queue: its kinds run Django code in a worker thread.

A sync `run` executes in a thread of its own, so each run closes the Django connections it
opened before it returns (`connections.close_all()` closes this thread's only).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core import mail
from django.db import connections
from django.utils import timezone

import nilo_job as job

from .models import Member

DAY_MS = 24 * 60 * 60 * 1_000


@dataclass
class SendWelcome:
    nilo_job = "django-welcome"
    retry = job.Retry(times=5, backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))

    member_id: int

    def run(self) -> None:
        try:
            member = Member.objects.filter(id=self.member_id).first()
            if member is None or member.welcomed_at is not None:
                return  # gone, or welcomed by an earlier call: the queue is at least once
            mail.send_mail("Welcome", "Thanks for joining.", None, [member.email])
            Member.objects.filter(id=member.id, welcomed_at=None).update(welcomed_at=timezone.now())
        finally:
            connections.close_all()


@dataclass
class Remind:
    nilo_job = "django-remind"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=60_000))

    member_id: int

    def run(self) -> None:
        try:
            member = Member.objects.filter(id=self.member_id).first()
            if member is not None:
                mail.send_mail("A reminder", "You asked us to remind you.", None, [member.email])
        finally:
            connections.close_all()


jobs = job.Jobs(kinds=[SendWelcome, Remind], store=job.Table(settings.DATABASE_URL))
