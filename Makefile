# Two commands for a newcomer, `make demo` and `make test`, and the maintainer's quick loop, `make check`
# (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=
# The suite mostly waits (JVM starts, Spark's first batches, conditions): workers side by side, each with
# its own session clusters, Redis and SparkSession (tests/conftest.py), shorten it on 2 cores.
WORKERS ?= 2

.PHONY: venv jars demo test check lint openapi docs clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found " + sys.version.split()[0] + ")")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $@

venv: $(VENV)/.installed

jars: venv  ## Kafka broker jars (Maven) + the aggregator's Spark connector (Spark's Ivy), cached outside git
	$(PY) -m stack.jars
	$(PY) -m aggregator.kafka_connector >/dev/null

demo: jars  ## three local sites (Kafka, driver, aggregator, service each), one gateway, Redis and sample traffic; Ctrl-C stops all
	$(PY) -m stack.demo

test: jars  ## the suite, in WORKERS pytest-xdist workers side by side; pass pytest arguments with ARGS="..."
	$(PY) -m pytest -n $(WORKERS) $(ARGS)

check: venv  ## mypy, then every test that needs no external process (no Kafka, Redis, Spark, JDK tool), in about a minute
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "not integration and not e2e and not interop and not containers" $(ARGS)

lint: venv  ## ruff, and mypy over the packages [tool.mypy] lists (as .ci/run does)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .demo .srm-checkpoints .pytest_cache .ruff_cache .mypy_cache *.egg-info

openapi: venv  ## regenerate swagger/openapi.json from the code
	$(PY) -m service.openapi_export

docs: venv  ## regenerate docs/configuration.md from contract/settings.py
	$(PY) -m contract.settings_reference --write
