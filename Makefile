# The two commands of the README: `make demo` (place GNMT) and `make test`.
# Both create the virtualenv and install what they need on a fresh machine.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tf-gdp-installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install demo test clean

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/place_gnmt.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

clean:
	rm -rf $(VENV) build dist *.egg-info

# `make pretrain` reproduces the shipped policy (tf_gdp/pretrained/) from
# scratch: fixed graphs, seed and an iteration budget (not seconds, so the
# result does not depend on machine load). Held-out graphs are never trained
# on. A killed run resumes from $(PRETRAIN_ROOT); `rm -rf` it to start over.
# Quick check: make pretrain PRETRAIN_ITERATIONS=2 PRETRAIN_GRAPHS=rnnlm2,layered:500 \
#   PRETRAIN_ROOT=build/pt-check PRETRAIN_OUT=build/pt-check/out
PRETRAIN_GRAPHS ?= rnnlm2,rnnlm4,inception_v3,wavenet2,gnmt2:source_length=8:target_length=8,gnmt4:source_length=6:target_length=6,layered:3000:seed=1,layered:5000:width=200:seed=2,cells:3000:seed=1,cells:5000:cell=64:seed=2
PRETRAIN_HELD_OUT ?= gnmt8,transformer_xl2,transformer_xl4,transformer_xl8,wavenet4,amoebanet
PRETRAIN_DEVICES ?= p100x4
PRETRAIN_ITERATIONS ?= 834
# The feed-forward placer (the no-attention variant): ~6x faster per iteration
# here, so 4x more iterations in the same time beat the attention placer.
PRETRAIN_PLACER ?= feedforward
PRETRAIN_SEED ?= 0
PRETRAIN_ROOT ?= build/pretrain
PRETRAIN_OUT ?= tf_gdp/pretrained
# The shipped policy (v3) predates the stage affinity and pipeline
# exploration: both are off here so that it is reproduced as it was trained.
PRETRAIN_V3 = --policy_config='{"stage_affinity": false}' --pipeline_exploration=0
PRETRAIN_CMD = $(PY) -m tf_gdp pretrain --graphs=$(PRETRAIN_GRAPHS) \
	--devices=$(PRETRAIN_DEVICES) --placer=$(PRETRAIN_PLACER) \
	--budget_iterations=$(PRETRAIN_ITERATIONS) $(PRETRAIN_V3) \
	--seed=$(PRETRAIN_SEED) --root_dir=$(PRETRAIN_ROOT) --log_every=60

.PHONY: pretrain
pretrain: $(STAMP)
	$(PRETRAIN_CMD)
	$(PY) -m tf_gdp.rl.shipped --root_dir=$(PRETRAIN_ROOT) --out=$(PRETRAIN_OUT) \
	  --held_out=$(PRETRAIN_HELD_OUT) --command="$(PRETRAIN_CMD)"

# --- Packaging: the wheel and the Bazel build (README "Packaging") ----------
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' tf_gdp/version.py)
WHEEL := dist/tf_gdp-$(VERSION)-py3-none-any.whl
BAZEL ?= bazel
BAZEL_FLAGS ?=
# Bazel runs tests and binaries on this virtualenv's interpreter
# (tools/bazel/venv_python.bzl).
BAZEL_PYTHON := --repo_env=TF_GDP_PYTHON=$(abspath $(PY))
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: wheel wheel-check bazel-install bazel-test bazel-test-all

# The wheel, with its package data (tf_gdp/pretrained/**, JSON files), in dist/.
# Only setuptools' own folders under build/ are cleared (build/ also holds
# pretraining runs): a stale build/lib would put deleted modules in the wheel.
wheel: $(STAMP)
	rm -rf build/lib build/bdist.* $(WHEEL)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	@echo "built $(WHEEL)"

# Installs the wheel into a fresh virtualenv in a temporary directory and runs
# it from elsewhere (tools/wheel_check.sh).
wheel-check: wheel
	PYTHON=$(PYTHON) tools/wheel_check.sh $(WHEEL)

# Bazel itself: Debian's bazel-bootstrap (Bazel 4.2.3) if `bazel` is missing.
bazel-install:
	@command -v $(BAZEL) >/dev/null || { \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y bazel-bootstrap || { \
	    $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y bazel-bootstrap; }; }

# Every test file not tagged "slow" in tests/BUILD (today: all of them).
bazel-test: $(STAMP) bazel-install
	$(BAZEL) test $(BAZEL_PYTHON) $(BAZEL_FLAGS) //tests:fast

# Every Bazel target: libraries, CLI, example, and all test files.
bazel-test-all: $(STAMP) bazel-install
	$(BAZEL) test $(BAZEL_PYTHON) $(BAZEL_FLAGS) //...
