"""docs/configuration.md is generated from contract/settings.py and must not drift from it."""

from __future__ import annotations

import re

from contract.settings import NAMED_SETTINGS, SETTINGS
from contract.settings_reference import REFERENCE, main, render


def test_the_committed_reference_equals_the_generated_one():
    assert REFERENCE.read_text() == render(), (
        "docs/configuration.md is stale: run python -m contract.settings_reference --write")


def test_every_key_has_one_row_with_its_type_scope_default_and_meaning():
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", render(), re.M)}
    assert set(rows) == set(SETTINGS) | {s.key for s in NAMED_SETTINGS}
    assert rows["metrics.period"] == (
        "| `metrics.period` | number | replication | `30` | Seconds between raw-metrics reports. |")
    assert rows["service.port"].startswith("| `service.port` | integer | process | `6670` |")
    assert "| per site | (none) |" in rows["service.remote.<site>.token"]
    assert rows["topics.exclude"].split(" | ")[3] == r"`.*[\-\.]internal, .*\.replica, __.*`"


def test_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    monkeypatch.setattr("contract.settings_reference.REFERENCE", stale)
    assert main(["--check"]) == 1
    assert "is stale" in capsys.readouterr().err
    assert main(["--write"]) == 0 and main(["--check"]) == 0
