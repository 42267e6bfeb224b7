"""Management commands for the queue (``queueworker``, ``enqueue``,
``queuestatus``), and what they share: turning options and settings into a
:class:`engine.http_client.BrokerClient`."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.core.management.base import CommandError

from engine import EngineError, open_store
from engine.http_client import BrokerClient
from queueadmin.runtime import queue_policy


def broker_client(*, brokers: Sequence[str] | None, token: str | None) -> BrokerClient:
    """A BrokerClient for ``brokers`` or, with none, for the leader the
    document at ``QUEUE_STORE_URL`` names (that store is only read).

    The token is ``token`` or ``QUEUE_API_TOKEN``. Raises CommandError when
    there is no token or the URLs or the store URL are unusable.
    """
    token = token or settings.QUEUE_API_TOKEN
    if not token:
        raise CommandError("no API token: pass --token or set QUEUE_API_TOKEN")
    try:
        if brokers:
            return BrokerClient(brokers, token=token, policy=queue_policy())
        store = open_store(settings.QUEUE_STORE_URL)
        return BrokerClient(token=token, store=store, policy=queue_policy())
    except (ValueError, EngineError) as exc:
        raise CommandError(str(exc)) from exc
