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
