"""Django for a benchmark's dashboard code, on a database of its own."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def django_on_scratch_database(prefix: str) -> None:
    """Set Django up (``DJANGO_SETTINGS_MODULE`` defaults to the project's
    settings) on a new SQLite database in a temporary folder named
    ``prefix``…, migrated as a node's is, and removed when the process exits.

    The dashboard's views audit, read plans and read the workers seen from the
    database: without it they would time refused queries, or touch the
    project's own ``var/db.sqlite3``. Call once, before anything else sets
    Django up; set any other environment the settings read first."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    scratch = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/db.sqlite3"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
