# lagwatch container image: the exporter only (confluent-kafka, prometheus-client, PyYAML).
#
#   docker build -t lagwatch .
#   docker run -p 9308:9308 lagwatch --bootstrap-servers kafka:9092
#
# BASE_IMAGE must provide python3 (>= 3.11) with the venv module, useradd and CA certificates:
# the official python images, or a Debian-based image with Debian's python3, with or without
# Debian's python3-pip. It is used for both stages, so the venv built in the first stage finds
# the same interpreter at the same path in the second. For reproducible builds pin it by digest:
#   --build-arg BASE_IMAGE=docker.io/library/python:3.11.13-slim-bookworm@sha256:<digest>
# CI builds without a Docker daemon or registry access, on debootstrapped Debian bookworm bases
# (Debian's python3, without and with python3-pip): see tools/build-image.
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
# EXTRAS: optional dependency groups of pyproject.toml, comma-separated (aws: MSK IAM's signer).
ARG EXTRAS=""
RUN python3 -c 'import os, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; extras = [e for e in os.environ["EXTRAS"].split(",") if e]; print("\n".join(p["dependencies"] + [d for e in extras for d in p["optional-dependencies"][e]]))' \
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
# The one version source is lagwatch_client/__init__.py; tools/build-image passes it.
ARG VERSION=unknown
# No installer in the runtime image: drop the base's pip, setuptools and wheel, and ensurepip's
# bundled wheels; then an unprivileged user with a fixed numeric id. Official python images install
# pip under /usr/local, where pip removes itself. Debian's python3-pip is owned by dpkg and PEP 668
# makes pip refuse to touch it ("externally-managed-environment"), so dpkg removes those packages
# (and whatever apt installed only for them, such as a compiler pulled in as a recommendation).
# setuptools and wheel go first: once pip has removed itself it cannot remove them.
RUN set -eu; \
    debian_pkgs=; \
    for mod in setuptools wheel pip; do \
        dir=$(python3 -c "import os, $mod; print(os.path.dirname($mod.__file__))" 2>/dev/null) || continue; \
        if command -v dpkg >/dev/null 2>&1 && owner=$(dpkg -S "$dir" 2>/dev/null); then \
            debian_pkgs="$debian_pkgs ${owner%%:*}"; \
        else \
            python3 -m pip uninstall -y -q --disable-pip-version-check "$mod"; \
        fi; \
    done; \
    if [ -n "$debian_pkgs" ]; then \
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --auto-remove $debian_pkgs >/dev/null; \
        rm -rf /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log; \
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
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
EXPOSE 9308
# Python's urllib, no curl in the image. If you change --listen, set LAGWATCH_HEALTHCHECK_URL.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["/opt/lagwatch/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['LAGWATCH_HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["lagwatch"]
# Secrets are not baked in: pass a --config file whose values reference environment variables.
CMD ["--listen", "0.0.0.0:9308"]
