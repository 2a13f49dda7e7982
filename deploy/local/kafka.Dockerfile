# Apache Kafka from the Maven Central jars the project resolves (stack/poms/kafka/pom.xml), on a Debian
# base: a local stand-in for the official apache/kafka image of the same version (deploy/README.md).
# It reads the official image's KAFKA_* environment (KAFKA_NODE_ID -> node.id), so compose.yaml's
# settings apply unchanged, and keeps /opt/kafka/bin/kafka-topics.sh for compose.yaml's healthcheck.
# Build context: the repository's root.
ARG BASE_IMAGE=localhost/srm-debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
COPY stack/poms/kafka/pom.xml /tmp/kafka-pom/pom.xml
# The goal stack/jars.py runs, pinned the same way (Debian's Maven 3.8 would pick plugin 2.8).
RUN mvn -B -q -f /tmp/kafka-pom/pom.xml \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory=/opt/kafka/libs \
 && rm -rf /root/.m2 /tmp/kafka-pom \
 && DEBIAN_FRONTEND=noninteractive apt-get purge -y --auto-remove maven
COPY stack/log4j2.properties /opt/kafka/config/log4j2.properties
COPY deploy/local/kafka-run.sh /opt/kafka/bin/run
COPY deploy/local/kafka-topics.sh /opt/kafka/bin/kafka-topics.sh
RUN useradd --system --uid 1000 --user-group --home-dir /opt/kafka --no-create-home appuser \
 && mkdir -p /var/lib/kafka/data /opt/kafka/config \
 && chown -R appuser:appuser /var/lib/kafka /opt/kafka/config
USER appuser
EXPOSE 9092
CMD ["/opt/kafka/bin/run"]
