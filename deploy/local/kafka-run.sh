#!/bin/sh
# Writes server.properties from the KAFKA_* environment the way the official apache/kafka image reads it
# (strip KAFKA_, lower case, '_' -> '.', '__' -> '_', '___' -> '-'), formats the log directory once
# (kept on a volume, the next start finds it formatted), then runs the combined broker and controller.
set -eu
config=/opt/kafka/config/server.properties
: "${KAFKA_LOG_DIRS:=/var/lib/kafka/data}"
export KAFKA_LOG_DIRS
env | grep '^KAFKA_' | grep -Ev '^KAFKA_(HEAP_OPTS|OPTS|JVM_PERFORMANCE_OPTS|LOG4J_OPTS)=' | while IFS='=' read -r name value; do
  key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
  printf '%s=%s\n' "$key" "$value"
done > "$config"
classpath='/opt/kafka/libs/*'
# The official image's default cluster id, so a volume moves between the two images.
java -Xmx128m -cp "$classpath" kafka.tools.StorageTool format --ignore-formatted \
  -t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$config"
# shellcheck disable=SC2086 # the heap options are several words
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
  -cp "$classpath" kafka.Kafka "$config"
