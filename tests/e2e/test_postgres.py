"""The app on PostgreSQL through ``DATABASE_URL``: a throwaway server on a
loopback port, started for this module from Debian's PostgreSQL binaries
(``.ci/run`` installs them), with the migrations, the login and an audited
dashboard action all going through it.

initdb refuses to run as root, so as root the server runs as the ``postgres``
user the Debian package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import open_store
from tests.e2e.harness import ROOT, Cluster, api, free_port
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"PostgreSQL's {name} is not installed (apt-get install postgresql; .ci/run does)")
    return path


def _as_server_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("postgres")
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
        base.chmod(0o755)
        # The server user must be able to reach the folder through its parents.
        for parent in base.parents:
            if parent == Path("/"):
                break
            parent.chmod(parent.stat().st_mode | 0o011)
    port = free_port()
    subprocess.run(_as_server_user([_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                                    "--encoding=UTF8", "--no-sync"]), check=True, capture_output=True, timeout=120)
    log = base / "server.log"
    subprocess.run(_as_server_user([
        _pg_bin("pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o",
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off",
        "start",
    ]), check=True, capture_output=True, timeout=120)
    try:
        import psycopg

        wait_for(lambda: _ready(port), 30, "postgres to accept connections")
        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE queueadmin")
        yield f"postgres://postgres@127.0.0.1:{port}/queueadmin"
    finally:
        subprocess.run(_as_server_user([_pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)


def _ready(port: int) -> bool:
    import psycopg

    try:
        psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


SCRIPT = textwrap.dedent('''
    import json
    import re
    import time
    from django.db import connection
    from django.contrib.auth.models import User
    from django.test import Client
    from engine.ops import claim_op, fail_op, push_op
    from queueadmin import runtime
    from queueadmin.models import AuditEntry

    assert connection.vendor == "postgresql", connection.vendor
    broker = runtime.start_broker()
    while broker.role != "leader":
        time.sleep(0.01)
    [job_id] = broker.execute(push_op("pg", ["x"], policy=broker.policy, max_attempts=1))
    [claimed] = broker.execute(claim_op("w", ["pg"], policy=broker.policy))
    broker.execute(fail_op(claimed.id, claimed.lease, error="boom", retry_in_seconds=None, policy=broker.policy))

    User.objects.create_superuser("pg-admin", "pg@example.com", "pw-for-postgres-test")
    client = Client()
    assert client.login(username="pg-admin", password="pw-for-postgres-test")
    # The dry run stores its plan in PostgreSQL; the run names it by its token.
    dry = client.post("/actions/", {"step": "preview", "action": "requeue", "ids": job_id, "next": "/"})
    assert dry.status_code == 200, dry.status_code
    [token] = re.findall(r'name="plan" value="([^"]+)"', dry.content.decode())
    response = client.post("/actions/", {"step": "run", "plan": token, "reason": "stored in postgres", "next": "/"})
    assert response.status_code == 302, response.status_code
    entry = AuditEntry.objects.get(jobs__job_id=job_id)
    assert (entry.outcome, entry.reason, entry.username) == ("ok", "stored in postgres", "pg-admin")
    page = client.get(f"/jobs/{job_id}/").content.decode()
    assert "requeued by pg-admin" in page and "stored in postgres" in page
    audit = client.get("/audit/", {"job": job_id}).content.decode()
    assert "stored in postgres" in audit
    # The export's query (distinct entries, by a job's id, newest first) on PostgreSQL.
    export = client.get("/audit/export/", {"job": job_id, "format": "json"})
    [record] = json.loads(b"".join(export.streaming_content))
    assert (record["reason"], record["job_ids"]) == ("stored in postgres", [job_id]), record
    runtime.stop_broker()
    print("postgres ok")
''')


def migrated(postgres_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a process of the app on ``postgres_url`` (no broker
    started by itself, a folder store), with ``extra``; migrated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_", "DJANGO_"))}
    env.update(PYTHONPATH=str(ROOT), DATABASE_URL=postgres_url, QUEUE_STORE_URL=f"file://{tmp_path / 'store'}",
               QUEUE_BROKER_AUTOSTART="false", **extra)
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                             capture_output=True, timeout=120)
    assert migrate.returncode == 0, migrate.stderr.decode()
    return env


def test_migrations_login_and_an_audited_action_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    env = migrated(postgres_url, tmp_path, ALLOWED_HOSTS="testserver",  # Django's test client, in the script
                   QUEUE_HEARTBEAT_SECONDS="60", QUEUE_TAKEOVER_SECONDS="120")
    check = subprocess.run([sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=ROOT,
                           env=env, capture_output=True, timeout=120)
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()

    run = subprocess.run([sys.executable, "manage.py", "shell", "-c", SCRIPT], cwd=ROOT, env=env,
                         capture_output=True, timeout=120)

    assert run.returncode == 0, (run.stdout.decode() + run.stderr.decode())[-3000:]
    assert "postgres ok" in run.stdout.decode()


NONCE_SCRIPT = textwrap.dedent('''
    from queueadmin.api.forward import use_nonce
    from queueadmin.models import ForwardNonce

    assert use_nonce("fresh-nonce-recorded-beside-a-lock"), "a new nonce was refused"
    assert not use_nonce("fresh-nonce-recorded-beside-a-lock"), "a replayed nonce was accepted"
    left = sorted(ForwardNonce.objects.values_list("nonce", flat=True))
    print("left", left)
''')


def test_an_expired_nonce_another_connection_holds_locked_is_skipped_not_waited_for(
    postgres_url: str, tmp_path: Path
) -> None:
    """A node stopped in the middle of deleting expired nonces keeps their row
    locks on PostgreSQL until its connection ends; the leader recording the
    next forwarded request's nonce must not wait on them (it hung before the
    delete skipped locked rows, so every forwarded action timed out)."""
    import psycopg

    env = migrated(postgres_url, tmp_path)
    dsn = postgres_url.replace("postgres://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("DELETE FROM queueadmin_forwardnonce")
        setup.execute("INSERT INTO queueadmin_forwardnonce (nonce, expires_at) VALUES "
                      "('expired-and-locked', now() - interval '1 hour'), "
                      "('expired-and-free', now() - interval '1 hour')")
    with psycopg.connect(dsn) as holder:  # a transaction left open, as by a stopped node
        holder.execute("SELECT 1 FROM queueadmin_forwardnonce WHERE nonce = 'expired-and-locked' FOR UPDATE")

        run = subprocess.run([sys.executable, "manage.py", "shell", "-c", NONCE_SCRIPT], cwd=ROOT, env=env,
                             capture_output=True, timeout=60)

        holder.rollback()
    assert run.returncode == 0, (run.stdout.decode() + run.stderr.decode())[-3000:]
    # The free expired row went; the locked one is left for a later call.
    assert "left ['expired-and-locked', 'fresh-nonce-recorded-beside-a-lock']" in run.stdout.decode()


def test_a_worker_whose_database_connection_was_closed_by_the_server_runs_its_next_job(
    postgres_url: str, tmp_path: Path, cluster_factory: Callable[..., Cluster]
) -> None:
    """A long-lived ``queueworker`` handles each job's database connections as
    Django handles a request's. The server ending the connection between two
    jobs (a restart, a failover, an idle timeout, here pg_terminate_backend)
    must cost the next job nothing: before, the handler thread kept its dead
    connection, and every later job of that thread failed until the worker was
    restarted (Django never reconnects by itself)."""
    import psycopg

    migrated(postgres_url, tmp_path)
    record = tmp_path / "record.txt"
    cluster = cluster_factory(DATABASE_URL=postgres_url)
    node = cluster.node()
    cluster.worker("--queue", "db", "--handler", "tests.e2e.handlers:database", "--broker", node.url,
                   E2E_RECORD=str(record))

    def lines(n: int) -> list[str]:
        text = record.read_text() if record.exists() else ""
        return [line for line in text.splitlines() if line.split()[1] == str(n)]

    assert api(node, "POST", "/api/v1/jobs", {"queue": "db", "payload": {"n": 1}}).status_code == 201
    wait_for(lambda: lines(1), 30, "the first job to run")
    assert [line.split()[0] for line in lines(1)] == ["ok"], lines(1)
    with psycopg.connect(postgres_url.replace("postgres://", "postgresql://"), autocommit=True) as admin:
        # With CONN_MAX_AGE=0 (the app's setting) the first job's connection is
        # closed when it ends, as after a request; a connection still open
        # would be terminated here and its next use would fail.
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = 'queueadmin' AND pid <> pg_backend_pid()")

    for n in (2, 3):
        assert api(node, "POST", "/api/v1/jobs", {"queue": "db", "payload": {"n": n}}).status_code == 201
        wait_for(lambda n=n: lines(n), 30, f"job {n} to run")  # type: ignore[misc]
        assert [line.split()[0] for line in lines(n)] == ["ok"], lines(n)


ON_COMMIT_SCRIPT = textwrap.dedent('''
    import os
    import time
    from django.contrib.auth.models import Group
    from django.db import transaction
    from django.test import override_settings
    from tests.e2e import sample_tasks as st

    broker, flag = os.environ["E2E_BROKER"], os.environ["E2E_ON_COMMIT"] == "on"
    options = {"BROKERS": [broker], "TOKEN": "e2e-token", "ENQUEUE_ON_COMMIT": flag}
    with override_settings(TASKS={"default": {"BACKEND": "queueadmin.tasks.ObjectStoreBackend",
                                              "QUEUES": ["default"], "OPTIONS": options}}):
        with transaction.atomic():
            group = Group.objects.create(name=f"on-commit-{flag}")
            result = st.group_name.enqueue(group.pk)
            time.sleep(4)  # a task pushed now is run now, before the row is committed
    print("id", result.id)
''')


def test_a_task_enqueued_on_commit_runs_after_the_row_it_reads_is_committed(
    postgres_url: str, tmp_path: Path, cluster_factory: Callable[..., Cluster]
) -> None:
    """A real task worker on PostgreSQL, a task enqueued inside the
    transaction that creates the row it reads. Without ENQUEUE_ON_COMMIT its
    first attempt runs before the commit and fails (the worker cannot see
    the row); with it, the push waits for the commit and the one attempt
    succeeds."""
    env = migrated(postgres_url, tmp_path)
    cluster = cluster_factory(DATABASE_URL=postgres_url)
    node = cluster.node()
    wait_for(lambda: node.role() == "leader", 15, "the node to lead")
    cluster.worker("--broker", node.url, "--wait-seconds", "1")
    store = open_store(cluster.store_url)

    def first_attempt(flag: str) -> dict[str, Any]:
        run = subprocess.run([sys.executable, "manage.py", "shell", "-c", ON_COMMIT_SCRIPT], cwd=ROOT,
                             env={**env, "QUEUE_STORE_URL": cluster.store_url, "E2E_BROKER": node.url,
                                  "E2E_ON_COMMIT": flag}, capture_output=True, timeout=120)
        assert run.returncode == 0, (run.stdout.decode() + run.stderr.decode())[-3000:]
        [job_id] = [line.split()[1] for line in run.stdout.decode().splitlines() if line.startswith("id ")]
        wait_for(lambda: store.get(f"results/{job_id}.json") is not None, 60, "the first attempt's result")
        blob = store.get(f"results/{job_id}.json")
        assert blob is not None
        return orjson.loads(blob.data)  # type: ignore[no-any-return]

    on = first_attempt("on")
    assert (on["status"], on["return_value"], on["errors"]) == ("SUCCESSFUL", "on-commit-True", [])
    off = first_attempt("off")
    assert off["status"] == "FAILED" and "DoesNotExist" in off["errors"][0]["exception_class_path"], off
