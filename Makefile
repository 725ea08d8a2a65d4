# The two quick-start commands: `make run` (dashboard + worker, embedded defaults) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cohort-installed

.PHONY: run test install browser lint flake-hunt

run: install
	$(PY) -m webapp.stack up

test: install browser
	$(PY) -m webapp.stack test $(ARGS)

# Repeat the integration and browser tests N times (HOG busy processes beside them) to catch a
# test that depends on the machine's speed: make flake-hunt N=10 HOG=2 [ARGS="-- -k resilience"]
N ?= 10
HOG ?= 0
flake-hunt: install browser
	$(PY) -m tests.flake_hunt --runs $(N) --hog $(HOG) $(ARGS)

install: $(STAMP)

# torch first, pinned, so a CPU machine takes the CPU build and nothing pulls CUDA wheels.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[train,dev]'
	touch $@

# Browser tests drive Debian's Chromium through Playwright (no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v "$${COHORT_CHROMIUM:-/nonexistent}" >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "Browser tests need Chromium: apt-get install chromium (or set COHORT_CHROMIUM=/path/to/chrome)"; exit 1; fi; }

lint: install
	$(PY) -m ruff check .
