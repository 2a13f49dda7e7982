"""The parts meet only in contract/ and clients/: driver, aggregator and service never import each other
nor the test stack; clients imports only contract; contract imports nothing of the project's. Checked on
the source (every import statement, also inside functions), so a lazy import cannot slip through; every
top-level package must have a rule here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("driver", "aggregator", "service")
ALLOWED = {
    "contract": {"contract"},
    "clients": {"clients", "contract"},
    **{part: {part, "clients", "contract"} for part in PARTS},
    # The local Kafka/Redis stack of the demo, the tests and the benches: never part of the product.
    "stack": {"stack", "clients", "contract"},
}
PACKAGES = sorted(path.parent.name for path in ROOT.glob("*/__init__.py"))


def imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def violations(package: str, root: Path = ROOT) -> list[str]:
    forbidden = set(ALLOWED) - ALLOWED[package]
    found = []
    for path in sorted((root / package).rglob("*.py")):
        name = path.relative_to(root).as_posix()
        wrong = imported_packages(path) & forbidden
        if wrong:
            found.append(f"{name} imports {', '.join(sorted(wrong))}")
    return found


def test_every_package_has_a_rule():
    assert set(PACKAGES) == set(ALLOWED)


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_their_rule_allows(package):
    assert violations(package) == []


@pytest.mark.parametrize(("package", "source", "imported"), [
    ("aggregator", "def f():\n    from service import app\n", "service"),
    ("driver", "import stack.kafka_cluster\n", "stack"),
    ("service", "from stack.jars import kafka_jars\n", "stack"),
    ("aggregator", "from stack.jars import kafka_jars\n", "stack"),
    ("contract", "from clients import kafka_clients\n", "clients"),
    ("clients", "from driver import replication\n", "driver"),
])
def test_the_rule_sees_a_forbidden_import(tmp_path, package, source, imported):
    (tmp_path / package).mkdir()
    (tmp_path / package / "m.py").write_text(source)
    assert violations(package, tmp_path) == [f"{package}/m.py imports {imported}"]
