"""connectors/ is the provider-adapter floor: it imports nothing from the runtime or the edges above it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ABOVE = ("runs", "simulator", "lucia_site")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((ROOT / "connectors").rglob("*.py")), ids=lambda p: p.name)
def test_a_connectors_module_imports_nothing_from_a_higher_floor(path):
    above = sorted(name for name in _imports(path) if name.split(".")[0] in ABOVE)
    assert not above, f"{path.relative_to(ROOT)} imports {above}"


def test_no_domain_module_imports_the_webhook_edge():
    for package in ("agents", "connectors", "runs"):
        for path in (ROOT / package).rglob("*.py"):
            assert not any(name.startswith("lucia_site.webhooks") for name in _imports(path)), path
