"""queueadmin: the Django project and app around the queue engine (``engine``).

``engine`` never imports this package; this package translates Django settings
into engine arguments and serves the HTTP API, the dashboard and admin actions.
"""

from __future__ import annotations
