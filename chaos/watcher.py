"""Watchers: one polls the store for every document version it can see, one
polls each node's health endpoint. Both only read, and record into the history."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import orjson

from chaos.cluster import Cluster
from chaos.history import History, Version
from engine import DOCUMENT_KEY, EngineError, open_store

STORE_POLL_SECONDS = 0.05
HEALTH_POLL_SECONDS = 0.25


def describe_document(data: bytes) -> dict[str, Any] | None:
    """seq, epoch, broker id and writer of a document's bytes, its segment
    keys, its schedules' marked ticks (with each one's outcome and when it
    was applied) and pauses, each limited queue's limit and running jobs, and
    each rate-limited queue's rate, window and running jobs' claim times;
    None if they don't parse."""
    try:
        doc = orjson.loads(data)
        broker = doc.get("broker") or {}
        info = {"seq": int(doc["seq"]), "epoch": int(broker.get("epoch") or 0), "broker": broker.get("id"),
                "writer": doc.get("writer")}
        if doc.get("schedules"):
            info["schedules"] = {str(name): str(mark["tick"]) for name, mark in doc["schedules"].items()}
            info["schedule_marks"] = {str(name): [str(mark["outcome"]), str(mark["at"])]
                                      for name, mark in doc["schedules"].items()}
        limits = {str(name): int(c["max_running"]) for name, c in (doc.get("queues") or {}).items()
                  if isinstance(c, dict) and c.get("max_running") is not None}
        if limits:
            info["limits"] = limits
            running: dict[str, int] = {}
            for job in doc.get("jobs") or ():
                if job.get("lease") is not None and job.get("queue") in limits:
                    running[job["queue"]] = running.get(job["queue"], 0) + 1
            info["running"] = running
        rates = {str(name): c["rate_limit"] for name, c in (doc.get("queues") or {}).items()
                 if isinstance(c, dict) and isinstance(c.get("rate_limit"), dict)}
        if rates:
            # Each rate-limited queue's rate and window, and the leases of its
            # jobs claimed in that window: checked against each other.
            info["rates"] = {name: [int(r["jobs"]), float(r["seconds"]), r.get("window_start"),
                                    int(r.get("window_started", 0))] for name, r in rates.items()}
            starts: dict[str, list[list[str]]] = {}
            for job in doc.get("jobs") or ():
                lease = job.get("lease")
                if lease is not None and job.get("queue") in rates:
                    starts.setdefault(job["queue"], []).append([str(job["id"]), str(lease["claimed_at"])])
            info["rate_starts"] = starts
        if doc.get("schedule_pauses"):
            info["schedule_pauses"] = {str(name): str(since) for name, since in doc["schedule_pauses"].items()}
        if "lanes" in doc:  # format 2 (and 3's delayed segments)
            info["segments"] = [str(ref["key"]) for lane in doc["lanes"].values()
                                for ref in (*lane["segments"], *lane.get("delayed", ()))]
        return info
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class StoreWatcher(threading.Thread):
    """Records each new version of the document (by ETag) with its seq, epoch and digest."""

    def __init__(
        self, store_url: str, history: History, stop: threading.Event, *, azure_connection_string: str | None = None
    ) -> None:
        super().__init__(name="store-watcher", daemon=True)
        self.store = open_store(store_url, azure_connection_string=azure_connection_string)
        self.history = history
        self.stop_event = stop

    def run(self) -> None:
        last: str | None = None
        try:
            while not self.stop_event.wait(STORE_POLL_SECONDS):
                try:
                    etag = self.store.etag(DOCUMENT_KEY)
                    if etag == last or etag is None:
                        if etag is None and last is not None:
                            self.history.event("watcher: the document is gone")
                        last = etag
                        continue
                    blob = self.store.get(DOCUMENT_KEY)
                except EngineError:
                    continue
                if blob is None:
                    continue
                last = blob.etag
                info = describe_document(blob.data)
                if info is None:
                    self.history.event(f"watcher: unreadable document version {blob.etag}")
                    continue
                self.history.version(Version(at=time.monotonic(), source="store",
                                             digest=hashlib.blake2b(blob.data, digest_size=12).hexdigest(), **info))
        finally:
            self.store.close()


class HealthWatcher(threading.Thread):
    """Records each node's health answer: role, seq, and the leader it names."""

    def __init__(self, cluster: Cluster, history: History, stop: threading.Event) -> None:
        super().__init__(name="health-watcher", daemon=True)
        self.cluster = cluster
        self.history = history
        self.stop_event = stop

    def run(self) -> None:
        while not self.stop_event.wait(HEALTH_POLL_SECONDS):
            for node in self.cluster.nodes:
                if node.paused or not node.alive:
                    continue
                health = node.health(timeout=0.5)
                if health is None:
                    continue
                broker = health.get("broker") or {}
                self.history.version(Version(
                    at=time.monotonic(), source=node.url, seq=int(health.get("seq") or 0),
                    epoch=int(broker.get("epoch") or 0), broker=broker.get("id"),
                    role=str(health.get("role")), pid=node.pid,
                ))
