"""Management commands for the queue (``queueworker``, ``enqueue``,
``queuestatus``, ``queueinit``, ``queuecheck``, ...), and what they share: turning options into a
:class:`engine.http_client.BrokerClient` (built by :func:`queueadmin.config.broker_client`),
and opening the store for the commands that read or write it directly."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.base import CommandError

from engine import DOCUMENT_KEY, BrokerClient, EngineError, ObjectStore
from queueadmin import config


def broker_client(*, brokers: Sequence[str] | None, token: str | None) -> BrokerClient:
    """A BrokerClient for ``brokers`` or, with none, for the leader the
    document at ``QUEUE_STORE_URL`` names (that store is only read).

    The token is ``token`` or ``QUEUE_API_TOKEN``. Raises CommandError when
    there is no token or the URLs or the store URL are unusable.
    """
    token = token or config.api_token()
    if not token:
        raise CommandError("no API token: pass --token or set QUEUE_API_TOKEN")
    try:
        return config.broker_client(brokers, token=token)
    except (ValueError, EngineError) as exc:
        raise CommandError(str(exc)) from exc


def open_document_store() -> tuple[ObjectStore, str]:
    """The store at ``QUEUE_STORE_URL``, newly opened (the caller closes it),
    and where the queue document is in it, for messages:
    ``<store>/queue.json``. Does no I/O except creating a local folder.
    Raises CommandError for an unusable store URL."""
    try:
        store = config.open_queue_store()
    except EngineError as exc:
        raise CommandError(str(exc)) from exc
    return store, f"{store.describe().rstrip('/')}/{DOCUMENT_KEY}"
