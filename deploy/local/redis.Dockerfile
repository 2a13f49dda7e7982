# Debian's redis-server (7.0.15 in bookworm, the version compose.yaml pins): a local stand-in for the
# official redis image. Like that image it keeps its files in /data and answers other containers
# (protected mode off; compose publishes no Redis port).
ARG BASE_IMAGE=localhost/srm-debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
COPY deploy/local/redis-run.sh /usr/local/bin/redis-run
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-run"]
CMD ["redis-server"]
