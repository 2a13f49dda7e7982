"""srm-control error paths: each is exit code 2 and one clear line on stderr, never a traceback.

No broker is needed: the unreachable cluster is a loopback port nobody listens on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from driver.control_cli import main
from stack.kafka_cluster import free_port
from stack.processes import REPO_ROOT


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "srm.properties"
    path.write_text(f"clusters = east, west\neast.bootstrap.servers = 127.0.0.1:{free_port()}\n"
                    f"west.bootstrap.servers = 127.0.0.1:{free_port()}\n")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("srm-control")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv, expected", [
    ([], "required: {topics,groups,offsets}"),
    (["tables"], "invalid choice: 'tables'"),
    (["topics"], "required: --source, --target"),
    (["groups", "--source", "east"], "required: --target"),
    (["offsets", "--source", "east", "--target", "west", "--export"], "required: --group"),
    (["offsets", "--source", "east", "--target", "west", "--group", "g"], "required: --export"),
    (["topics", "--source", "east", "--target", "west", "--timeout", "soon"], "'soon' is not a number"),
])
def test_missing_or_bad_arguments(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert expected in one_error_line(err)


@pytest.mark.parametrize("source, target, expected", [
    ("north", "west", "--source 'north' is not a cluster listed in 'clusters'"),
    ("east", "south", "(known: east, west)"),
    ("east", "east", "--source and --target are both 'east'"),
])
def test_unknown_aliases_and_pairs(capsys, config, source, target, expected):
    code, _, err = run(capsys, "topics", "--config", str(config), "--source", source, "--target", target,
                       "--add", "orders")
    assert code == 2
    assert expected in one_error_line(err)


def test_edit_without_action(capsys, config):
    code, _, err = run(capsys, "groups", "--config", str(config), "--source", "east", "--target", "west")
    assert code == 2
    assert "nothing to do" in one_error_line(err)


@pytest.mark.parametrize("flag, value, expected", [
    ("--add", ",", "--add got ',': no topics named"),
    ("--add-blacklist", "x[", "'x[' is not a valid regular expression"),
])
def test_bad_entries(capsys, config, flag, value, expected):
    code, _, err = run(capsys, "topics", "--config", str(config), "--source", "east", "--target", "west",
                       flag, value)
    assert code == 2
    assert expected in one_error_line(err)


def test_missing_config_file(capsys, tmp_path):
    code, _, err = run(capsys, "topics", "--config", str(tmp_path / "nope.properties"), "--source", "east",
                       "--target", "west", "--list")
    assert code == 2
    assert "nope.properties' not found" in one_error_line(err)


def test_bad_config_names_file_line_and_key(capsys, tmp_path):
    path = tmp_path / "bad.properties"
    path.write_text("clusters = east, west\neast.bootstrap.servers = a:1\nwest.bootstrap.servers = b:1\n"
                    "east->west.enabled = maybe\n")
    code, _, err = run(capsys, "topics", "--config", str(path), "--source", "east", "--target", "west",
                       "--list")
    assert code == 2
    assert f"{path}:4: east->west.enabled: expected true or false, got 'maybe'" in one_error_line(err)


def test_config_defaults_to_srm_config_variable(capsys, config, monkeypatch):
    monkeypatch.setenv("SRM_CONFIG", str(config))
    code, _, err = run(capsys, "topics", "--source", "east", "--target", "mars", "--add", "t")
    assert code == 2
    assert f"of {config}" in one_error_line(err)


@pytest.mark.parametrize("argv", [
    ["topics", "--add", "orders"],
    ["groups", "--list"],
    ["offsets", "--group", "g", "--export"],
])
def test_unreachable_target_cluster(capsys, config, argv):
    code, out, err = run(capsys, *argv[:1], "--config", str(config), "--source", "east", "--target", "west",
                         "--timeout", "1", *argv[1:])
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "cluster 'west' (127.0.0.1:" in line and "did not answer within 1 s" in line


@pytest.mark.usefixtures("external_processes")
def test_console_entry_point_prints_no_traceback(config):
    done = subprocess.run([sys.executable, "-m", "driver.control_cli", "topics", "--config", str(config),
                           "--source", "east", "--target", "west", "--timeout", "1", "--add", "t"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "did not answer" in one_error_line(done.stderr)
