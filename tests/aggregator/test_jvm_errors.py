"""A batch whose Spark job is cancelled (a query stopped mid-batch) fails with a short text, which Spark's
own check reads as the stop's (aggregator.jvm_errors)."""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from aggregator.jvm_errors import JvmCallFailed, short_jvm_errors, summary

# How Py4J hands the JVM an exception raised in a Python callback such as foreachBatch's function.
PROXY_ERROR = "An exception was raised by the Python Proxy. Return Message: "


def test_a_cancelled_batch_fails_with_a_short_text_spark_reads_as_the_stop(spark):
    context = spark.sparkContext
    jvm = context._jvm
    assert jvm is not None
    group = f"run-{uuid.uuid4()}"  # a streaming query's batches run in the job group of its run id

    def slow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        time.sleep(300)  # until cancelled, as a batch in flight when its query is stopped
        yield from batches

    frame = spark.range(0, 2, numPartitions=2).mapInArrow(slow, "id long")
    seen: dict[str, object] = {}

    def batch() -> None:
        context.setJobGroup(group, "a batch of a query being stopped", interruptOnCancel=True)
        try:
            with short_jvm_errors("rollup_east: batch 7"):
                frame.toArrow()
        except Exception as exc:
            seen["error"], seen["text"] = exc, traceback.format_exc()
            # Spark's test, in the thread whose job group it reads (StreamExecution.isInterruptionException)
            proxy_error = jvm.py4j.Py4JException(PROXY_ERROR + traceback.format_exc())
            seen["a stop"] = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution \
                .isInterruptionException(proxy_error, context._jsc.sc())

    runner = threading.Thread(target=batch)
    runner.start()
    deadline = time.monotonic() + 120
    while not list(context.statusTracker().getJobIdsForGroup(group)):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    context.cancelJobGroup(group)
    runner.join(120)
    assert not runner.is_alive()

    error, text = seen["error"], str(seen["text"])
    assert isinstance(error, JvmCallFailed), text
    assert str(error).startswith("rollup_east: batch 7: ")
    assert "cancelled" in str(error) and group in str(error)  # the cause is kept, its frames are not
    assert "\tat " not in text and "Py4JJavaError" not in text and len(text) < 4000, text
    assert seen["a stop"] is True


def test_the_summary_keeps_each_exception_line_and_drops_the_frames():
    java = ("An error occurred while calling o1287.getResult.\n"
            ": org.apache.spark.SparkException: Exception thrown in awaitResult: \n"
            "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:70)\n"
            "\tat py4j.Gateway.invoke(Gateway.java:282)\n"
            "Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access "
            "topics: [srm-metrics.east.internal]\n"
            "\tat org.apache.kafka.clients.consumer.internals.Fetcher.fetch(Fetcher.java:1)\n"
            "\t... 42 more\n")
    assert summary(java) == (
        "An error occurred while calling o1287.getResult.\n"
        ": org.apache.spark.SparkException: Exception thrown in awaitResult:\n"
        "Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access "
        "topics: [srm-metrics.east.internal]")


def test_a_long_java_text_is_capped_and_cannot_restart_sparks_match():
    quoted = "py4j.protocol.Py4JJavaError: An error occurred while calling o1.x"
    lines = summary("\n".join([quoted] + [f"Caused by: java.lang.IllegalStateException: {'x' * 900}"] * 40))
    assert "Py4JJavaError:" not in lines
    assert len(lines.splitlines()) == 24 and lines.splitlines()[-1] == "... 18 more lines"  # 41, 23 kept
    assert max(len(line) for line in lines.splitlines()) <= 500


@pytest.mark.parametrize("cause", [None, KeyError("a")])
def test_other_errors_pass_as_they_are(cause):
    error = ValueError("b")
    with pytest.raises(ValueError) as raised, short_jvm_errors("rollup_east: batch 1"):
        raise error from cause
    assert raised.value is error
