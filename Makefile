# reclaim's two entry points: `make demo` (the end-to-end demo on the embedded default stack) and
# `make test` (the whole suite against a real Kafka broker, S3 endpoints and Spark). Both create the
# virtual environment and install the pinned dependencies on first use; the Kafka jars and the Spark
# Kafka connector are fetched from Maven Central on first use into ~/.cache/reclaim.

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo servers test test-unit test-integration chaos test-pythons lint docs venv clean bench

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@# -qq: errors only; -q would print setuptools' notice on every editable install of a package-dir layout
	$(PY) -m pip install -qq --disable-pip-version-check -c constraints.txt -e '.[all,dev,docs]'
	@# The import hook of that install is invisible to pyright, Pylance and jedi: they read .package/ instead.
	$(PY) -m devtools.package_links
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/reclaim demo

# What the tests against real servers install before they run (`.ci/run` starts it early, in the background).
servers: $(STAMP)
	$(PY) -m devtools.gotools prometheus promtool minio toxiproxy-server fake-gcs-server  # built from their Go modules once (minutes), then cached
	$(PY) -m devtools.azurite_server install  # Azurite from npm's registry (about 20 s, 361 MB), then cached
	$(PY) -m devtools.pg_server install  # Debian's postgresql package, when no server is installed
	$(PY) -m devtools.docsite install  # Debian's chromium package, when none is installed; mermaid from npm's registry

# Everything (tests/unit, tests/integration, tests/chaos: the testpaths) in one pytest run, so that each
# session server starts once.
test: servers
	$(PY) -m pytest $(PYTEST_ARGS)  # testpaths: tests

# The tests that need no server, nor Java, Go or root: only Python.
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

# The tests against real servers: Kafka, S3 endpoints, PostgreSQL, Spark, Prometheus.
test-integration: servers
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

# The chaos suite: servers of each test's own, killed and cut off while a backlog drains.
chaos: servers
	$(PY) -m pytest tests/chaos $(PYTEST_ARGS)

# reclaim on the other Python versions it supports: each gets a virtualenv of its own (.venv-3.N) with
# every extra, and runs the server-free tests. An interpreter under pyenv is found by its version.
OTHER_PYTHONS ?= 3.12 3.13
test-pythons:
	@for version in $(OTHER_PYTHONS); do \
	  venv=.venv-$$version; \
	  pyenv=$$(pyenv versions --bare 2>/dev/null | grep "^$$version" | tail -1); \
	  test -x $$venv/bin/python || PYENV_VERSION=$${pyenv:-$$version} python$$version -m venv $$venv || exit 1; \
	  $$venv/bin/python -m pip install -qq --disable-pip-version-check -c constraints.txt -e '.[all,dev,docs]' || exit 1; \
	  echo "Python $$version: $$($$venv/bin/python --version)"; \
	  $$venv/bin/python -m pytest -q tests/unit $(PYTEST_ARGS) || exit 1; \
	done

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m devtools.typecheck
	$(PY) -m devtools.importcheck  # every reclaim import, resolved by pyright as an editor resolves it

# The documentation site, built strict (a broken link or a name the API page cannot resolve fails it) into
# .site/ (not committed). The CLI reference is generated from the parser, the performance page from
# benchmarks/results/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet -d .site

# The benchmarks that run on one machine without root, about 30 minutes on a quiet 2-core machine:
# deletion throughput at 5,000 objects, 3 rounds, its S3 part on MinIO (~8 min); a worker draining
# backlogs of 10k and 100k records (~3 min); audits of 10k and 100k objects (~2 min); the retention job
# at its full size (~5 min); offload against boto3's transfer manager, 50 chunks of 1 MiB, 3 rounds, on
# MinIO (~1 min); consumption retention of 1,000 Kafka topics x 10 partitions x 20 groups (~9 min). The
# full-size runs are by hand: the deletion benchmark also on moto (its
# default) and on MinIO at 50,000 objects (--parts s3 --minio --objects 50000 --rounds 2, about 30 min),
# and the worker and audit at 10k, 100k and 1M (their defaults). benchmarks/multihost.py is left out:
# it needs root for its network namespaces. Every benchmark prints its figures and appends them to one
# results file, pinned before the first so that the whole run writes one file.
BENCH_DELETION  ?= --parts s3,phase1,fs --objects 5000 --rounds 3 --minio
BENCH_WORKER    ?= --sizes 10000,100000
BENCH_AUDIT     ?= --sizes 10000,100000
BENCH_OFFLOAD   ?= --minio
BENCH_RETENTION ?= --streams 10000 --subscribers 10 --latency-streams 1000 --latency-subscribers 5 \
                   --latency-cuts 20 --rounds 3
BENCH_TOPICS    ?= --topics 1000 --partitions 10 --groups 20 --rounds 3
bench: $(STAMP)
	$(PY) -m devtools.gotools minio  # the S3 part runs on MinIO (--minio), built from its Go module once
	export RECLAIM_BENCH_RESULTS_FILE=$${RECLAIM_BENCH_RESULTS_FILE:-$$($(PY) -m benchmarks.results path)} && \
	$(PY) -m benchmarks.deletion_throughput $(BENCH_DELETION) && \
	$(PY) -m benchmarks.worker_memory $(BENCH_WORKER) && \
	$(PY) -m benchmarks.audit_memory $(BENCH_AUDIT) && \
	$(PY) -m benchmarks.retention_job $(BENCH_RETENTION) && \
	$(PY) -m benchmarks.offload_throughput $(BENCH_OFFLOAD) && \
	$(PY) -m benchmarks.topic_retention $(BENCH_TOPICS) && \
	echo "results: $$RECLAIM_BENCH_RESULTS_FILE"

clean:
	rm -rf $(VENV) .venv-3.* .typecheck .package .site .reclaim .pytest_cache .mypy_cache .ruff_cache
