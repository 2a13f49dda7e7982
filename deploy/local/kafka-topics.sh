#!/bin/sh
# The official image's kafka-topics.sh, which compose.yaml's healthcheck runs.
exec java -Xmx128m -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
  -cp '/opt/kafka/libs/*' org.apache.kafka.tools.TopicCommand "$@"
