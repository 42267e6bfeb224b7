"""The broker's HTTP API, version 1: the contract in ``docs/api.md``.

Modules, one concept each: :mod:`~queueadmin.api.errors` (error codes,
statuses and JSON responses), :mod:`~queueadmin.api.auth` (bearer token),
:mod:`~queueadmin.api.parsing` (reading request bodies),
:mod:`~queueadmin.api.endpoint` (the wrapper every view shares),
:mod:`~queueadmin.api.views`, :mod:`~queueadmin.api.urls`, and
:mod:`~queueadmin.api.forward` (operator actions a standby forwards to the
leader). The wire format itself, both directions, is :mod:`engine.wire`.
"""
