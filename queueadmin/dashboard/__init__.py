"""The operator dashboard: pages, live updates over websockets, audited actions.

Modules: :mod:`.snapshot` (a decoded version of queue.json), :mod:`.source`
(where snapshots come from, rates and latency), :mod:`.pages` (what each page
shows), :mod:`.views`, :mod:`.actions` (plan, run, audit), :mod:`.forms`,
:mod:`.consumers` (the live socket) and :mod:`.urls`.
"""
