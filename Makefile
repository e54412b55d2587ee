# Lucia — every target installs what it needs. With DATABASE_URL unset, the
# embedded PostgreSQL in .lucia/pgdata is used (started by db-up).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
export DJANGO_SETTINGS_MODULE ?= lucia_site.settings
DEV_ENV := DJANGO_DEBUG=$${DJANGO_DEBUG:-true}

.PHONY: setup lock db-up db-down migrate seed dev demo test bench chaos lint chromium

setup: $(VENV)/.synced

# --compile-bytecode: the installed packages' bytecode is written once here, so no process compiles Django and the
# rest from source at every start where PYTHONDONTWRITEBYTECODE is set (django.setup() took 2.3 s instead of 1.2).
$(VENV)/.synced: requirements-dev.lock
	@command -v uv >/dev/null 2>&1 || [ -x "$(UV)" ] || python3 -m pip install --quiet uv
	@[ -x $(PY) ] || $$(command -v uv || echo $(UV)) venv --quiet $(VENV) -p python3
	@$$(command -v uv || echo $(UV)) pip sync --quiet --compile-bytecode -p $(PY) requirements-dev.lock
	@touch $@

lock:
	uv pip compile --quiet --no-header requirements.in -o requirements.lock
	uv pip compile --quiet --no-header requirements-dev.in -o requirements-dev.lock

db-up: setup
	@if [ -z "$$DATABASE_URL" ]; then $(PY) -m lucia_site.embedded_db up; \
	else echo "using DATABASE_URL"; fi

db-down: setup
	@$(PY) -m lucia_site.embedded_db down

migrate: db-up
	@$(DEV_ENV) $(PY) manage.py migrate --no-input -v 0

seed: migrate
	@$(DEV_ENV) $(PY) manage.py seed

# collectstatic: the Studio's CSS and JS, compressed, for WhiteNoise (a deployment runs it too).
dev: seed
	@$(DEV_ENV) $(PY) manage.py collectstatic --no-input -v 0
	@echo "Studio: http://localhost:8000/admin/  API docs: http://localhost:8000/api/docs/"
	@trap 'kill 0' EXIT; $(DEV_ENV) $(PY) manage.py runworkers & $(DEV_ENV) $(PY) manage.py runserver 8000

demo: seed
	@status=0; for path in fixtures/agents/*.yaml; do \
		$(DEV_ENV) $(PY) manage.py simulate "$$(basename "$$path" .yaml)" --all --weeks 6 || status=1; \
	done; exit $$status

# The browser tests drive Debian's chromium (no browser download works everywhere): install it when missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || [ -x "$${LUCIA_CHROMIUM:-/nonexistent}" ] || { \
		echo "installing Debian's chromium for the browser tests (tests/browser)"; \
		apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } \
		|| { echo "could not install chromium: run 'apt-get install chromium' as root, or set LUCIA_CHROMIUM"; exit 1; }; }

# One pytest-xdist process per core (at most 4: each migrates its own test database): the suite mostly waits
# on PostgreSQL and on the processes its slow tests start, so two cores run it in about 60% of the serial time.
test: db-up chromium
	@$(PY) -m pytest -n auto --maxprocesses 4

bench: migrate
	@$(DEV_ENV) $(PY) manage.py bench

# Its own PostgreSQL in a temporary directory (restarted as a fault): needs neither db-up nor DATABASE_URL.
# Pass options through CHAOS_ARGS, e.g. make chaos CHAOS_ARGS="--runs 50 --faults crash,db-restart".
chaos: setup
	@$(PY) -m chaos $(CHAOS_ARGS)

lint: setup
	@$(VENV)/bin/ruff check .
