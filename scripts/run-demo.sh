#!/usr/bin/env bash
# The processes of `make run`: the app (daphne, with the embedded broker), a
# demo worker and a trickle of demo jobs, until Ctrl-C or SIGTERM.
#
#   scripts/run-demo.sh VENV_BIN PORT    (ACCESS_LOG: daphne's access log, var/access.log)
#
# Stopping goes in order, and each process gets exactly one signal, from here:
# the demo jobs stop, then the worker (SIGTERM: it claims nothing more and its
# running jobs have its grace period, 30 s, to finish and be acknowledged; a
# second Ctrl-C makes it leave them now, to be handed out again once their
# leases expire), then the app, which the worker needed to acknowledge. Exit
# status 0 then; if a process ends by itself, the others are stopped the same
# way and its status is returned.
#
# The children run in process groups of their own (set -m while starting
# them), so the terminal's Ctrl-C reaches only this script: a worker signalled
# twice (by the terminal, then by a script passing the signal on) would drop
# its running jobs at once. `make run` starts this script as a foreground job
# of its own (set -m in the recipe), so make does not get the Ctrl-C either
# and ends with status 0.
set -uo pipefail

bin=$1
port=$2
url="http://127.0.0.1:$port"

# Two malloc arenas: the README's advice for nodes ("Deploying"; docs/benchmark.md).
export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"

# A recurring demo job every 30 s (README, "Recurring jobs"); an exported
# QUEUE_SCHEDULES replaces it ("" for none).
demo_schedules='{"demo-report": {"every_seconds": 30, "queue": "demo", "payload": {"task": "scheduled-report", "seconds": 1, "fail_rate": 0}}}'
export QUEUE_SCHEDULES="${QUEUE_SCHEDULES-$demo_schedules}"

set -m
"$bin/daphne" --access-log "${ACCESS_LOG:-var/access.log}" -b 127.0.0.1 -p "$port" queueadmin.asgi:application &
app=$!
"$bin/python" manage.py queueworker --queue demo --handler queueadmin.demo:work --concurrency 2 \
  --worker-id demo-worker --broker "$url" &
worker=$!
"$bin/python" manage.py demo --every 3 --broker "$url" &
demo=$!
set +m

signals=0
# The first signal ends the wait below; a second one tells the worker to leave now.
trap 'signals=$((signals + 1)); if [ "$signals" -gt 1 ]; then kill -TERM "$worker" 2>/dev/null; fi' INT TERM HUP
# If whoever started this goes away (make killed with SIGTERM, say), stop too.
parent=$PPID
(while kill -0 "$parent" 2>/dev/null; do sleep 1; done; kill -TERM $$ 2>/dev/null) &
watcher=$!

wait -n
status=$?
if [ "$signals" -gt 0 ]; then
  status=0
  echo "stopping: the demo worker finishes its running jobs first (Ctrl-C again to leave them to expire)"
fi
kill -TERM "$demo" "$worker" 2>/dev/null
while kill -0 "$worker" 2>/dev/null; do wait "$worker"; done
kill -TERM "$app" 2>/dev/null
while kill -0 "$app" 2>/dev/null; do wait "$app"; done
kill "$watcher" 2>/dev/null
wait
exit "$status"
