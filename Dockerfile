# One image for srm-driver, srm-aggregator and srm-service (the command picks the part).
FROM python:3.11.10-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/srm
COPY pyproject.toml README.md ./
COPY contract contract
COPY clients clients
COPY driver driver
COPY aggregator aggregator
COPY service service
COPY stack stack
RUN pip install --no-cache-dir . \
 && SRM_CACHE_DIR=/opt/srm/cache python -m stack.jars
ENV SRM_CACHE_DIR=/opt/srm/cache
# srm-service (a site's service or the gateway) listens here; Grafana reaches it under /grafana.
EXPOSE 6670
