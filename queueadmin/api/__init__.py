"""The broker's HTTP API, version 1: the contract in ``docs/api.md``.

Served as its own ASGI application, before Django (:mod:`~queueadmin.api.app`,
routed in ``queueadmin/asgi.py``). Modules, one concept each:
:mod:`~queueadmin.api.http` (the request and response endpoints see),
:mod:`~queueadmin.api.hosts` (the ``Host`` check), :mod:`~queueadmin.api.errors`
(error codes, statuses and JSON responses), :mod:`~queueadmin.api.auth`
(bearer token), :mod:`~queueadmin.api.grants` (what a token may do: its
queues and calls), :mod:`~queueadmin.api.parsing` (reading request bodies),
:mod:`~queueadmin.api.endpoint` (the wrapper every view shares),
:mod:`~queueadmin.api.views`, :mod:`~queueadmin.api.routing` and
:mod:`~queueadmin.api.urls` (the route table), and
:mod:`~queueadmin.api.forward` (operator actions a standby forwards to the
leader). The wire format itself, both directions, is :mod:`engine.wire`.
"""
