"""The parts meet only in contract/: driver, aggregator and service never import each other, and
contract imports none of them. Checked on the source (every import statement, also inside functions),
so a lazy import cannot slip through."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("driver", "aggregator", "service")
ALLOWED = {"contract": {"contract"}, **{part: {part, "contract"} for part in PARTS}}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def violations(package: str) -> list[str]:
    own = set(ALLOWED) - ALLOWED[package]
    return [f"{path.relative_to(ROOT)} imports {', '.join(sorted(imported_packages(path) & own))}"
            for path in sorted((ROOT / package).rglob("*.py")) if imported_packages(path) & own]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_parts_import_only_themselves_and_contract(package):
    assert violations(package) == []


def test_the_rule_sees_a_forbidden_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from aggregator import query\n")
    assert imported_packages(module) == {"aggregator"}
