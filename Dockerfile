# lagwatch container image: the exporter only (confluent-kafka, prometheus-client, PyYAML).
#
#   docker build -t lagwatch .
#   docker run -p 9308:9308 lagwatch --bootstrap-servers kafka:9092
#
# BASE_IMAGE must provide python3 (>= 3.11) with the venv module, useradd and CA certificates.
# It is used for both stages, so the venv built in the first stage finds the same interpreter
# at the same path in the second. For reproducible builds pin it by digest:
#   --build-arg BASE_IMAGE=docker.io/library/python:3.11.13-slim-bookworm@sha256:<digest>
# CI builds without a Docker daemon or registry access, on a debootstrapped Debian bookworm base
# (Debian's python3): see tools/build-image.
ARG BASE_IMAGE=docker.io/library/python:3.11.13-slim-bookworm

# ---------------------------------------------------------------- builder: venv + wheel
FROM ${BASE_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1
RUN python3 -m venv /opt/lagwatch
WORKDIR /src
# Runtime dependencies first, read from pyproject.toml, so that with layer caching
# (docker build, buildah bud --layers) a source-only change does not reinstall them.
COPY pyproject.toml README.md ./
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /tmp/requirements.txt \
 && /opt/lagwatch/bin/pip install -r /tmp/requirements.txt
# Only the exporter and the wire format it shares with reporters (lagwatch_client): spark_metrics
# (the listener that runs inside Spark drivers, next to pyspark) is not in the build context, so
# the wheel built here leaves it out.
COPY exporter ./exporter
COPY lagwatch_client ./lagwatch_client
# The project itself, as a wheel, without extras (no pyspark, no grafanalib, no test tools);
# then pip and setuptools leave the venv so the runtime stage carries no installer.
RUN /opt/lagwatch/bin/pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && /opt/lagwatch/bin/pip install --no-deps /tmp/wheels/lagwatch-*.whl \
 && /opt/lagwatch/bin/pip uninstall -y -q pip setuptools \
 && /opt/lagwatch/bin/lagwatch --version

# ---------------------------------------------------------------- runtime
FROM ${BASE_IMAGE}
# No installer in the runtime image: drop a system pip (official python images ship one) and
# ensurepip's bundled wheels; then an unprivileged user with a fixed numeric id.
RUN set -eu; \
    if python3 -m pip --version >/dev/null 2>&1; then \
        python3 -m pip uninstall -y -q --disable-pip-version-check pip setuptools wheel; \
    fi; \
    rm -rf /usr/share/python-wheels \
        "$(python3 -c 'import ensurepip, os; print(os.path.dirname(ensurepip.__file__))')/_bundled" \
        /root/.cache; \
    groupadd --gid 10001 lagwatch; \
    useradd --uid 10001 --gid 10001 --no-create-home --no-log-init --home-dir /nonexistent \
        --shell /usr/sbin/nologin lagwatch
COPY --from=builder /opt/lagwatch /opt/lagwatch
ENV PATH=/opt/lagwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LAGWATCH_HEALTHCHECK_URL=http://127.0.0.1:9308/healthz
LABEL org.opencontainers.image.title="lagwatch" \
      org.opencontainers.image.description="Kafka consumer-lag Prometheus exporter" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
EXPOSE 9308
# Python's urllib, no curl in the image. If you change --listen, set LAGWATCH_HEALTHCHECK_URL.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["/opt/lagwatch/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['LAGWATCH_HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["lagwatch"]
# Secrets are not baked in: pass a --config file whose values reference environment variables.
CMD ["--listen", "0.0.0.0:9308"]
