"""The operator dashboard: pages, live updates over websockets, audited actions.

Modules: :mod:`.snapshot` (a decoded version of queue.json), :mod:`.source`
(where snapshots come from, rates and latency), :mod:`.pages` (what each page
shows), :mod:`.views`, :mod:`.actions` (plan, run, audit), :mod:`.plans`
(dry runs kept until they run), :mod:`.forward` (a standby's actions, run by
the leader), :mod:`.forms`, :mod:`.consumers` (the live socket),
:mod:`.origin` (which pages may open it) and :mod:`.urls`.
"""
