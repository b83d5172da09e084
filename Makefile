# `make run` and `make test` set themselves up: venv, install from the lock file, database.
# The venv's interpreter: PYTHON when given, else the distribution's /usr/bin/python3 when it is
# 3.11+ and can make a venv, else python3 on PATH. Distribution builds are compiled with
# optimizations that pyenv's default build leaves out: on the ingestion benchmark the web
# workers spent 7-26% less CPU per event on Debian's 3.11 than on pyenv's (3 paired runs).
PYTHON ?= $(or $(shell for candidate in /usr/bin/python3 python3; do \
	$$candidate -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& echo $$candidate && break; done),python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install compile run test e2e e2e-deps bench soak lint typecheck check worker beat stop clean lock

# No "new release of pip" notice: the next line upgrades it anyway, and the lock pins the rest.
PIP := $(BIN)/python -m pip --quiet --disable-pip-version-check

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -r requirements.lock
	# setuptools warns on every editable install of a flat layout that same-named folders in the
	# working directory could shadow the packages: here those folders are the packages.
	PYTHONWARNINGS="ignore:Editable installation.:UserWarning" $(PIP) install --no-deps -e .
	touch $(STAMP)

# The ingestion hot path compiled to C by mypyc (footprint_site/compiled.py); compiled again
# whenever its source changed. Without a C compiler it says so and the source runs as is.
compile: $(STAMP)
	$(BIN)/python -m footprint_site.compiled

install: compile

run: compile
	$(BIN)/python -m footprint_site.stack

# The suite runs against DATABASE_URL when set, else the embedded PostgreSQL; likewise the broker.
CHROMIUM ?= /usr/bin/chromium
PYTEST := DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-test-only} $(BIN)/python -m pytest

# The whole suite: everything, then the browser journeys in Debian's Chromium. pytest's exit
# code 5 (nothing collected) is a failure here, never a pass. Each pytest run stops the embedded
# PostgreSQL it started (tests/early_environment.py), so nothing it started outlives it.
# A green run has run the browser tests: without Chromium, root installs it (make e2e-deps) and
# anyone else is told how; SKIP_E2E=1 is the only way to skip them, and the run says so.
test: compile
	$(PYTEST) $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi
	@if [ "$(SKIP_E2E)" = 1 ]; then echo "*** Browser tests skipped by request (SKIP_E2E=1) ***"; exit 0; fi; \
	if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then $(MAKE) --no-print-directory e2e-deps || exit 1; \
		else echo "make test: the browser tests need $(CHROMIUM): run \`make e2e-deps\` as root to install it, or set SKIP_E2E=1 to skip them."; exit 1; fi; \
	fi; \
	$(MAKE) --no-print-directory e2e

e2e: compile
	$(PYTEST) -m e2e tests/e2e; rc=$$?; if [ $$rc -eq 5 ]; then echo "no browser tests collected: failing"; exit 1; fi; exit $$rc

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
e2e-deps:
	test -x $(CHROMIUM) || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)

# Each benchmark prints figures as ratios against a baseline measured in the same run.
bench: compile
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/artifacts.py
	$(BIN)/python bench/asks.py
	$(BIN)/python bench/otlp.py
	$(BIN)/python bench/explorer.py
	$(BIN)/python bench/retention.py
	$(BIN)/python bench/refusal_order.py
	$(BIN)/python bench/dashboard.py

# SOAK_MINUTES (30) of steady mixed load on gunicorn + Celery worker + beat, real PostgreSQL and
# Redis; fails on errors, memory growth or any mismatch with the database. Then the API fuzz with
# many more examples than `make test` runs. Both always run; either failing fails the target.
soak: compile
	$(BIN)/python bench/soak.py; rc=$$?; \
	FUZZ_EXAMPLES=200 $(PYTEST) tests/test_fuzz_api.py || rc=1; \
	exit $$rc

worker: compile
	$(BIN)/celery -A footprint_site worker --loglevel=INFO

beat: compile
	$(BIN)/celery -A footprint_site beat --loglevel=INFO

stop: $(STAMP)
	$(BIN)/python -c "import os; from pathlib import Path; from footprint_site.embedded_postgres import stop; stop(Path(os.environ.get('FOOTPRINT_DATA_DIR') or '.data').resolve() / 'postgres')"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: compile  # the Django plugin imports settings, which refuse stale compiled copies
	DJANGO_SECRET_KEY=typecheck DATABASE_URL=postgres://typecheck@localhost/typecheck $(BIN)/mypy footprint_site tenancy ledger artifacts

check: lint typecheck test

# Re-pin every dependency (run after editing pyproject.toml).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -e '.[dev]'
	# --all: mypyc builds through setuptools, which venvs of Python 3.12+ no longer carry.
	.lock-venv/bin/pip freeze --all --exclude-editable | grep -v -e '^-e' -e '^pip==' > requirements.lock
	# The image installs only what the server runs on.
	.lock-venv/bin/python .ci/runtime_lock.py > requirements-runtime.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .pytest_cache
	find ledger footprint_site -name '*.so' -delete
