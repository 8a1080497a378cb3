# The two commands a newcomer needs:
#   make test   - set everything up and run the whole test suite
#   make demo   - local Kafka + workload + lagwatch + Prometheus, Ctrl-C to stop
SHELL := /bin/sh
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAFKA_VERSION := 4.2.1
KAFKA_LEGACY_VERSION := 3.9.2
SPARK_VERSION := 4.0.0
PYTEST_ARGS ?=

.PHONY: test demo setup prereqs jars interceptor system-packages lint dashboards clean

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

demo: setup
	$(PY) -m devenv.demo

setup: prereqs $(VENV)/.installed jars interceptor system-packages

prereqs:
	@tools/check-prereqs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

jars:
	@tools/fetch-jars kafka $(KAFKA_VERSION) .cache/kafka-$(KAFKA_VERSION)/libs
	@tools/fetch-jars kafka $(KAFKA_LEGACY_VERSION) .cache/kafka-$(KAFKA_LEGACY_VERSION)/libs
	@tools/fetch-jars streams $(KAFKA_VERSION) .cache/kafka-streams-$(KAFKA_VERSION)/libs
	@tools/fetch-jars spark $(SPARK_VERSION) .cache/spark-kafka-$(SPARK_VERSION)/libs

interceptor:
	@tools/build-interceptor

system-packages:
	@tools/install-system-packages

lint:
	$(VENV)/bin/ruff check .

dashboards:
	$(PY) -m dashboards.generate

clean:
	rm -rf $(VENV) .cache .pytest_cache
