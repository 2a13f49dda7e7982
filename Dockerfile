# One image for srm-driver, srm-aggregator and srm-service (the command picks the part).
# BASE_IMAGE: any Debian bookworm image; the official Python image by default. Without a registry, a
# bookworm root filesystem made by debootstrap does as well (deploy/README.md): Debian's own python3 then
# runs the project.
ARG BASE_IMAGE=python:3.11.10-slim-bookworm

FROM ${BASE_IMAGE} AS build
# Debian's python3 only where the base lacks one (the official image has its own in /usr/local).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates openjdk-17-jre-headless \
      $(command -v python3 >/dev/null || echo python3 python3-venv) \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/srm/venv
# pip trusts the system's authorities (with any the base adds), not only its own bundle.
ENV PATH=/opt/srm/venv/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
WORKDIR /src

# The dependency list alone, so that the layer installing it is re-used until the list itself changes
# (not at every edit of pyproject.toml).
FROM build AS requirements
COPY pyproject.toml ./
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > requirements.txt

FROM build AS install
COPY --from=requirements /src/requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
COPY pyproject.toml README.md ./
COPY contract contract
COPY clients clients
COPY driver driver
COPY aggregator aggregator
COPY service service
COPY stack stack
# The aggregator's Spark Kafka connector jars, fetched from Maven Central by Spark's own Ivy
# (aggregator/kafka_connector.py), so the aggregator starts on them with no network; readable by the
# parts' user.
RUN pip install --no-cache-dir --no-deps . \
 && SRM_CACHE_DIR=/opt/srm/cache python -m aggregator.kafka_connector \
 && chmod -R a+rX /opt/srm/cache

FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless $(command -v python3 >/dev/null || echo python3) \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/srm --no-create-home srm \
 && mkdir -p /var/lib/srm/checkpoints /etc/srm \
 && chown -R srm:srm /var/lib/srm
COPY --from=install /opt/srm /opt/srm
ENV PATH=/opt/srm/venv/bin:$PATH \
    SRM_CACHE_DIR=/opt/srm/cache \
    PYTHONUNBUFFERED=1
WORKDIR /opt/srm
USER srm
# srm-service (a site's service or the gateway) listens here; Grafana reaches it under /grafana.
EXPOSE 6670
# Per part (stack/container_health.py): the service's /health answers; the driver's Kafka clusters accept
# a connection; the aggregator's too, and its Redis, and its Spark JVM runs.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["python", "-m", "stack.container_health"]
