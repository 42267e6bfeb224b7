#!/usr/bin/env python
"""Django's command-line entry point for queueadmin (migrate, createsuperuser, ...)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run a management command with queueadmin's settings unless others are named."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
