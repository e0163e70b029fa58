"""`python -m examples.django_tasks <command>`: Django's manage.py for the example project."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_tasks.settings")
execute_from_command_line(sys.argv)
