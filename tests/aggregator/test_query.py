"""Pure choices the rollup query makes before Spark starts it."""

from __future__ import annotations

import pytest

from aggregator.query import LOCAL_CHECKPOINT_MANAGER, checkpoint_file_manager


@pytest.mark.parametrize(("checkpoint_dir", "default_fs"), [
    ("/var/lib/srm/checkpoints", "file:///"),
    ("file:/var/lib/srm/checkpoints", "hdfs://namenode:8020"),
    ("file:///var/lib/srm/checkpoints", "file:///"),
    ("relative/checkpoints", "file:///"),
])
def test_local_checkpoints_use_the_file_system_api(checkpoint_dir, default_fs):
    assert checkpoint_file_manager(checkpoint_dir, default_fs) == LOCAL_CHECKPOINT_MANAGER


@pytest.mark.parametrize(("checkpoint_dir", "default_fs"), [
    ("hdfs://namenode:8020/srm/checkpoints", "file:///"),
    ("/srm/checkpoints", "hdfs://namenode:8020"),
    ("s3a://bucket/srm/checkpoints", "file:///"),
])
def test_other_file_systems_keep_sparks_choice(checkpoint_dir, default_fs):
    assert checkpoint_file_manager(checkpoint_dir, default_fs) is None
