# loglake: `make demo` brings the platform up and shows the speed layer; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.loglake-installed
# The installer of the pinned set: uv resolves requirements.txt to the same packages as pip
# (pip freeze of both identical on 2026-11-29) in a third of the time (23 s vs 71 s, warm caches).
UV_VERSION := 0.13.9
# The cache outside the repo (loglake.core.paths.cache_home): jars, the drivers' CDS archive and the
# wheels of the pins PyPI serves only as source, built once (setup/wheelhouse.py says why).
LOGLAKE_CACHE ?= $(HOME)/.cache/loglake
WHEELS := $(LOGLAKE_CACHE)/wheels
SDIST_ONLY := pyspark pyspark-client
LOGLAKE := $(VENV)/bin/loglake

.PHONY: compose-up compose-down images
.PHONY: setup setup-test jars test test-compose test-unit test-integration test-long bench soak demo up down status clean-state docs

## setup: what `make demo` runs on: Java and Maven (if missing), .venv with pinned packages, the broker's and
## Spark's jars from Maven Central. The rest comes with setup-test or on first use (loglake/local/fetch.py).
setup: $(STAMP) jars

$(STAMP): requirements.txt pyproject.toml setup/system-deps.sh
	bash setup/system-deps.sh
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "loglake needs Python 3.11, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(PY) setup/wheelhouse.py $(WHEELS) $(SDIST_ONLY)
	$(PY) -m uv pip install -q --python $(PY) --find-links $(WHEELS) -r requirements.txt
	$(PY) -m uv pip install -q --python $(PY) --no-deps -e .
	touch $@

jars: $(STAMP)
	$(PY) -m loglake.local.jars kafka spark

## setup-test: beside setup's, what only the suite and the benchmarks need, fetched side by side: Chromium,
## nginx, Prometheus, faketime (Debian), the schema registry and the S3 jars (Maven), versitygw and
## statsd_exporter (Go), the drivers' CDS archive
setup-test: setup
	$(PY) -m loglake.local.fetch

## test: the suite in two pytest workers, one test file each at a time (each worker starts its own
## broker and Spark session), but the tests marked `long` (make test-long)
test: setup-test
	$(PY) -m pytest -n 2 --dist loadfile -m "not long"

## test-long: the tests marked `long`: the long fault scenarios at CI size (R2, R3, R4, R6, R7, broker
## kills, the local cluster's leader and worker kills) and end-to-end runs whose parts make test
## covers elsewhere (docs/testing.md), ~15 min
test-long: setup-test
	$(PY) -m pytest -n 2 --dist loadfile -m long

## test-compose: the docker/ stack (docker/stack.py) built and started as its own compose project on
## free ports, loglake driven across its containers, then faults, each checked exact (tests/compose;
## figures in .loglake/test-compose/results.json); needs Docker (setup/docker-deps.sh); ~40 min
test-compose: setup-test
	bash setup/docker-deps.sh
	LOGLAKE_TEST_COMPOSE=1 $(PY) -m pytest tests/compose -v -x --timeout 3600

test-unit: setup-test
	$(PY) -m pytest tests/unit

test-integration: setup-test
	$(PY) -m pytest tests/integration

## bench: every benchmark beside its reference (bench/results/<date>.json, charts, table); ~40 min
bench: setup-test
	$(PY) -m bench.run $(BENCH_ARGS)

## soak: the fault scenarios at full scale (soak/results/<date>.json and .png)
soak: setup-test
	$(PY) -m soak.run $(SOAK_ARGS)

## docs: the manual (docs/) as a site in site/ with MkDocs, strict: a broken link or a page left out of
## the nav fails the build
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

## demo: bring the platform up, produce events, a scheduled batch run through Airflow, an exact serving view
demo: setup
	$(LOGLAKE) demo

## up/down/status: the embedded platform in the background (Kafka, speed streams, Airflow)
up: setup
	$(LOGLAKE) up

down: setup
	$(LOGLAKE) down

status: setup
	$(LOGLAKE) status

## clean-state: delete the local state directory (topics, tables, checkpoints, logs)
clean-state: down
	rm -rf .loglake

## compose-up: the docker/ stack (Kafka x3, Spark standalone, Airflow with Celery, the S3 store, Prometheus) built
## and started on this machine: Docker if missing (setup/docker-deps.sh), secrets and images made if missing, every
## health check waited for, then where the UI, the brokers, the master, the store and Prometheus answer
compose-up: $(STAMP)
	bash setup/docker-deps.sh
	$(PY) docker/stack.py up

## compose-down: stop and remove the stack's containers; VOLUMES=1 deletes its volumes too (topics, lake, metadata)
compose-down:
	$(PYTHON) docker/stack.py down $(if $(VOLUMES),--volumes)

## images: build the stack's images (docker/images.sh; unchanged layers come from BuildKit's cache)
images:
	bash setup/docker-deps.sh
	bash docker/images.sh
