# The two commands a newcomer needs:
#   make test   - set everything up and run the whole test suite
#   make demo   - local Kafka + workload + lagwatch + Prometheus, Ctrl-C to stop
SHELL := /bin/sh
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAFKA_VERSION := 4.4.0
KAFKA_CLIENTS_VERSION := 4.2.1
KAFKA_LEGACY_VERSION := 3.9.2
SPARK_VERSION := 4.0.0
SPARK35_VERSION := 3.5.3
SPARK_NEWEST_VERSION := 4.2.0
SPARK35_CONNECT_VERSION := 3.5.4
PYTEST_ARGS ?=

.PHONY: test test-unit record demo runtime-setup setup prereqs jars pyenvs interceptor system-packages image-bases go-tools lint dashboards manifests clean

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# Fast feedback: the tests that need no broker, Spark or image (seconds).
test-unit: $(VENV)/.installed
	$(PY) -m pytest -m unit -q $(PYTEST_ARGS)

# Re-record the replay fixtures (tests/recordings/) from the live scenario tests, then
# regenerate docs/detection.md; the fleet's: python -m bench.fleet --record (bench/fleet.py).
record: setup
	LAGWATCH_RECORD=tests/recordings $(PY) -m pytest -q tests/test_scenarios.py tests/test_group_types.py \
		tests/test_jvm_interceptor.py tests/test_spark.py tests/test_membership.py tests/test_evidence.py
	$(PY) -m tests.test_replay

demo: runtime-setup
	$(PY) -m devenv.demo

# What the demo needs; the tests also need the JVM interceptor, the Go-built chart tools
# and the PySpark 3.5 venv.
runtime-setup: prereqs $(VENV)/.installed jars system-packages
setup: runtime-setup interceptor pyenvs go-tools image-bases

prereqs:
	@tools/check-prereqs

# No pip cache (--no-cache-dir): pyspark is an sdist of about 400 MB, which the cache would
# keep twice (download and built wheel) beside the installed copy; disks on CI can be tight.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-cache-dir --upgrade pip
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-cache-dir -e '.[test]'
	touch $@

jars:
	@tools/fetch-jars kafka $(KAFKA_VERSION) .cache/kafka-$(KAFKA_VERSION)/libs
	@tools/fetch-jars kafka $(KAFKA_LEGACY_VERSION) .cache/kafka-$(KAFKA_LEGACY_VERSION)/libs
	@tools/fetch-jars kafka $(KAFKA_CLIENTS_VERSION) .cache/kafka-$(KAFKA_CLIENTS_VERSION)/libs
	@tools/fetch-jars streams $(KAFKA_CLIENTS_VERSION) .cache/kafka-streams-$(KAFKA_CLIENTS_VERSION)/libs
	@tools/fetch-jars spark $(SPARK_VERSION) .cache/spark-kafka-$(SPARK_VERSION)/libs
	@tools/fetch-jars spark $(SPARK35_VERSION) .cache/spark-kafka-$(SPARK35_VERSION)/libs
	@tools/fetch-jars spark $(SPARK_NEWEST_VERSION) .cache/spark-kafka-$(SPARK_NEWEST_VERSION)/libs
	@tools/fetch-jars spark-connect $(SPARK35_CONNECT_VERSION) .cache/spark-connect-$(SPARK35_CONNECT_VERSION)/libs

# PySpark 3.5 and newest driver virtualenvs and a wheelhouse (release and light-client tests), cached.
pyenvs: $(VENV)/.installed
	@$(PY) -m devenv.pyenvs $(SPARK35_VERSION) $(SPARK_NEWEST_VERSION)

interceptor:
	@tools/build-interceptor

system-packages:
	@tools/install-system-packages

# The container image's two Debian bases (debootstrapped once, cached in .cache/image); the
# image itself is built from the Dockerfile by the tests that use it (tests/support/image_build.py).
# Needs root (debootstrap, buildah chroot), as the image tests do; skipped otherwise.
image-bases: system-packages
	@if [ "$$(id -u)" -eq 0 ]; then tools/build-image --base bookworm --base-only && \
		tools/build-image --base bookworm-pip --base-only; \
	else echo "image-bases: not root, skipped (the image tests need root: -m 'not image')"; fi

# Helm (built from its Go module, once) and the chart's custom-resource checker.
go-tools:
	@tools/install-helm >/dev/null
	@tools/build-crcheck >/dev/null

lint:
	$(VENV)/bin/ruff check .

dashboards:
	$(PY) -m dashboards.generate

# deploy/manifests/ from the Helm chart (after changing the chart, the alerts or the dashboards).
manifests: go-tools
	tools/render-manifests

clean:
	rm -rf $(VENV) .cache .pytest_cache
