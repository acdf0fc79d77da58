# Quickstart: `make up` (start the engine) and `make test` (the whole suite).
# Needs only python3: the first target run creates .venv and installs the project into it.

PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
EXTRAS   ?= dev,postgres,redis,nats
# Reinstalled only when pyproject.toml is newer than the stamp: `make up` installs what running needs
# (RUN_STAMP), `make test` and the other targets the development tools and every backend too (STAMP).
RUN_STAMP := $(VENV)/.installed-run
STAMP    := $(VENV)/.installed
PIP      := $(BIN)/python -m pip --disable-pip-version-check --no-input
# Four workers on two cores: most tests wait on subprocesses, sockets and timers, not the CPU. Work
# stealing: an idle worker takes tests queued on a busy one, so long acceptance tests do not pile up at the
# end on one worker. `make test PYTEST_ARGS=` runs them one at a time.
PYTEST_ARGS ?= -n 4 --dist worksteal --durations=15
# Some tests only: `make test TESTS="tests/unit tests/contract/test_x.py"` (both passes run just those).
TESTS    ?=

.PHONY: venv browser up test lint bench clean

venv: $(STAMP)

$(RUN_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing jobengine into $(VENV) (what running needs; make test adds the development tools) ..."
	$(PIP) install --progress-bar on -e .
	@touch $@

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing jobengine[$(EXTRAS)] into $(VENV) (the development tools and every backend) ..."
	@# setuptools>=77 in the venv too: tests/unit/test_quality.py builds the wheel without build isolation.
	$(PIP) install --progress-bar on --upgrade 'setuptools>=77'
	$(PIP) install --progress-bar on -e '.[$(EXTRAS)]'
	@touch $@ $(RUN_STAMP)

up: $(RUN_STAMP)
	$(BIN)/jobengine up

# The dashboard's browser tests drive Debian's chromium package (never a browser Playwright downloads).
browser:
	@# Without root (or apt), say so and go on: the browser tests then skip with that reason (and fail under CI).
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "note: could not install Debian's chromium; the browser tests will skip"

test: venv browser
	@# The Go worker SDK's tests (tests/acceptance/test_go_worker.py) need a Go toolchain: the system's.
	@command -v go >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go) \
		|| echo "note: could not install golang-go; the Go SDK tests will skip"
	@# The PostgreSQL-behind-a-pooler tests (tests/integration/postgres/test_pgbouncer.py) start Debian's pgbouncer.
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer) \
		|| echo "note: could not install pgbouncer; the PgBouncer tests will skip"
	@# The Sentinel failover tests (tests/integration/test_redis_sentinel.py, tests/acceptance/test_sentinel_failover.py)
	@# start Debian's redis-sentinel next to redis-server.
	@command -v redis-sentinel >/dev/null || test -x /usr/bin/redis-sentinel || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-sentinel) \
		|| echo "note: could not install redis-sentinel; the Sentinel tests will skip"
	@# Bytecode written once here: where PYTHONDONTWRITEBYTECODE is set, every `jobengine` subprocess the tests
	@# start would compile the whole package again (about half of its start-up).
	$(BIN)/python -m compileall -q -j 0 src tests
	$(BIN)/pytest $(PYTEST_ARGS) -m "not serial" $(TESTS)
	@# Tests that assert a bound in time run alone: four workers' load would stretch what they measure.
	@# Exit code 5 is "no test collected": TESTS named no serial test.
	$(BIN)/pytest -m serial $(TESTS) || [ $$? -eq 5 ]

lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/python -m mypy
	$(BIN)/lint-imports --no-logo

bench: venv
	@if [ -f bench/__main__.py ]; then \
		set -x; $(BIN)/python -m bench; \
	elif [ -f bench/run.py ]; then \
		set -x; $(BIN)/python bench/run.py; \
	else \
		echo "no bench/__main__.py or bench/run.py yet" >&2; exit 1; \
	fi

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache src/*.egg-info
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +
