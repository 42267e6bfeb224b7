# queueadmin: the two set-up commands are `make run` and `make test`.
# Both create .venv from Python 3.12 when it is missing and install into it,
# from the lock files in requirements/ (`make lock` regenerates them).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PORT ?= 8000
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# Stamps record what was installed; they are older than a lock file after it
# changes, so the next run re-installs. Deleting .venv deletes them too.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench
# Unit tests: everything but real processes, the browser, the long runs and the fuzzing.
FAST_TESTS := not e2e and not slow and not fuzz

.PHONY: help venv run cluster test test-fast lock bench screenshots clean

help:
	@echo "make run        install if needed, migrate, serve at http://127.0.0.1:$(PORT)/ (PORT=...)"
	@echo "make cluster    three nodes (ports 8000-8002) on one local store, two workers and demo jobs: watch a failover"
	@echo "make test       install if needed, then ruff, mypy, makemigrations --check and pytest"
	@echo "make test-fast  the unit tests only (no e2e, slow or fuzz tests), in under a minute"
	@echo "make lock       re-resolve requirements/*.lock from pyproject.toml (UPGRADE=1: newest allowed versions)"
	@echo "make bench      install the bench extra and run python -m bench"
	@echo "make screenshots  run the browser tests and save its pages to docs/screenshots/"
	@echo "make clean      remove .venv, caches and build files (keeps var/, the local queue and DB)"

# Creates $(VENV) from Python 3.12 unless it is already a working 3.12 venv;
# a venv from another Python (or a broken one) is rebuilt, not patched.
define ENSURE_VENV
@if [ -e $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then \
  echo "$(VENV) is not a working Python 3.12 venv; recreating it"; rm -rf $(VENV); \
fi
@if [ ! -e $(PY) ]; then \
  py=""; \
  for candidate in python3 python3.12; do \
    if command -v $$candidate >/dev/null 2>&1 && \
       $$candidate -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then \
      py=$$candidate; break; \
    fi; \
  done; \
  if [ -z "$$py" ]; then echo "Python 3.12 is required: install it (pyenv install 3.12, or apt-get install python3.12 python3.12-venv)" >&2; exit 1; fi; \
  echo "creating $(VENV) with $$(command -v $$py) ($$($$py --version))"; \
  $$py -m venv $(VENV); \
fi
endef

# The lock pins every package with its hashes; the project itself goes in
# editable, without dependencies (the lock already has them all).
define INSTALL_LOCK
$(PIP) -r $(1)
$(PIP) --no-deps -e .
touch $@
endef

venv: $(DEV_STAMP)

$(DEV_STAMP): requirements/dev.lock pyproject.toml
	$(ENSURE_VENV)
	$(call INSTALL_LOCK,requirements/dev.lock)

# What `make run` needs and no more; a venv with the dev extra has it too.
$(RUN_STAMP): requirements/run.lock pyproject.toml
	$(ENSURE_VENV)
	@if [ -e $(DEV_STAMP) ] && [ $(DEV_STAMP) -nt requirements/run.lock ]; then touch $@; else \
	  $(PIP) -r requirements/run.lock && $(PIP) --no-deps -e . && touch $@; fi

lock:
	@test -x $(VENV)/bin/uv || { echo "uv is missing: run make venv first" >&2; exit 1; }
	@# uv keeps the versions already in a lock unless asked to upgrade them.
	for spec in "run.lock:" "dev.lock:--extra dev" "bench.lock:--extra dev --extra bench"; do \
	  $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.12 \
	    --custom-compile-command "make lock" $(if $(UPGRADE),--upgrade) \
	    pyproject.toml $${spec#*:} -o requirements/$${spec%%:*}; \
	done

run: $(RUN_STAMP)
	mkdir -p var
	@# A local API token, made once and kept in var/ (export QUEUE_API_TOKEN to use your own).
	@test -s var/api-token || $(PY) -c 'import secrets; print(secrets.token_urlsafe(24))' > var/api-token
	@# And a secret key (export DJANGO_SECRET_KEY to use your own): operator actions forwarded to the
	@# leader, from a standby's dashboard or manage.py queueaction, are signed with it, never with the dev key.
	@test -s var/secret-key || (umask 077; $(PY) -c 'import secrets; print(secrets.token_urlsafe(50))' > var/secret-key)
	QUEUE_API_TOKEN="$${QUEUE_API_TOKEN:-$$(cat var/api-token)}" $(PY) manage.py migrate --noinput
	@QUEUE_API_TOKEN="$${QUEUE_API_TOKEN:-$$(cat var/api-token)}" $(PY) manage.py demo --logins
	@echo "queueadmin is up at http://127.0.0.1:$(PORT)/  (Ctrl-C stops the app, the demo worker and the demo jobs)"
	@echo "API token: $${QUEUE_API_TOKEN:-$$(cat var/api-token)}  (workers: export QUEUE_API_TOKEN=\$$(cat var/api-token))"
	@# The app (daphne, with the embedded broker), a demo worker and a trickle
	@# of demo jobs (scripts/run-demo.sh). Ctrl-C stops them in order, the
	@# worker's running jobs finish first; set -m makes the script a foreground
	@# job of its own, so the Ctrl-C reaches it and not make, which exits 0.
	export QUEUE_API_TOKEN="$${QUEUE_API_TOKEN:-$$(cat var/api-token)}" \
	  DJANGO_SECRET_KEY="$${DJANGO_SECRET_KEY:-$$(cat var/secret-key)}" \
	  QUEUE_ADVERTISE_URL="$${QUEUE_ADVERTISE_URL:-http://127.0.0.1:$(PORT)}"; \
	set -m; scripts/run-demo.sh $(VENV)/bin $(PORT); \
	: "not exec'd by bash as the last command: it must be a job of its own"

# Three nodes on one store under var/cluster/, two workers, demo jobs (manage.py cluster
# says what runs where). The command stops everything itself on Ctrl-C; set -m
# makes it a foreground job of its own, as for make run, so the Ctrl-C reaches
# it and not make, which exits 0.
cluster: $(RUN_STAMP)
	@set -m; $(PY) manage.py cluster --port $(PORT); \
	: "not exec'd by bash as the last command: it must be a job of its own"

# Azurite, the Azure Blob emulator the az:// store tests start, from its npm
# lock (fake-gcs-server comes in a wheel of the dev lock). A stamp of our own:
# npm gives the files it unpacks a fixed old date.
AZURITE := tools/azurite/node_modules/.installed

$(AZURITE): tools/azurite/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is required for the Azure store tests (apt-get install nodejs npm; .ci/run does)" >&2; exit 1; }
	npm ci --prefix tools/azurite --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

test: venv $(AZURITE)
	mkdir -p var
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	@# makemigrations runs the system checks too. Without an API token they
	@# warn (queueadmin.tasks.W002) as they should for a deployment; a check of
	@# the migrations is not one, so it gets a token it never uses.
	QUEUE_API_TOKEN="$${QUEUE_API_TOKEN:-makemigrations-check}" $(PY) manage.py makemigrations --check --dry-run
	@# Two pytest workers (one per core, at most two), handing tests to whichever is
	@# free (worksteal): most e2e tests wait on processes more than they compute, so
	@# pytest takes 16 to 20 minutes here instead of 24. Every test picks its own
	@# ports and folders; none shares state with another.
	$(VENV)/bin/pytest -n auto --maxprocesses 2 --dist worksteal

test-fast: venv
	@# One pytest worker per core (pytest-xdist): the unit tests share no ports or files.
	$(VENV)/bin/pytest -q -n auto -m "$(FAST_TESTS)"

$(BENCH_STAMP): requirements/bench.lock $(DEV_STAMP)
	$(call INSTALL_LOCK,requirements/bench.lock)

bench: $(BENCH_STAMP)
	$(PY) -m bench

screenshots: venv
	QUEUEADMIN_SCREENSHOTS=docs/screenshots $(VENV)/bin/pytest -q tests/e2e/test_dashboard_browser*.py

clean:
	rm -rf $(VENV) *.egg-info build dist .pytest_cache .ruff_cache .mypy_cache
	find . -path ./var -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
