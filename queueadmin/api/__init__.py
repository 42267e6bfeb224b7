"""The broker's HTTP API, version 1: the contract in ``docs/api.md``.

Modules, one concept each: :mod:`~queueadmin.api.errors` (error codes,
statuses and JSON responses), :mod:`~queueadmin.api.auth` (bearer token),
:mod:`~queueadmin.api.parsing` (request bodies into engine operations),
:mod:`~queueadmin.api.endpoint` (the wrapper every view shares),
:mod:`~queueadmin.api.views` and :mod:`~queueadmin.api.urls`.
"""
