# reclaim's two entry points: `make demo` (the end-to-end demo on the embedded default stack) and
# `make test` (the whole suite against a real Kafka broker, S3 endpoints and Spark). Both create the
# virtual environment and install the pinned dependencies on first use; the Kafka jars and the Spark
# Kafka connector are fetched from Maven Central on first use into ~/.cache/reclaim.

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint venv clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[all,dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/reclaim demo

test: $(STAMP)
	$(PY) -m devtools.gotools prometheus promtool minio toxiproxy-server  # built from their Go modules once (minutes), then cached
	$(PY) -m devtools.pg_server install  # Debian's postgresql package, when no server is installed
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m devtools.typecheck

clean:
	rm -rf $(VENV) .reclaim .pytest_cache .mypy_cache .ruff_cache
