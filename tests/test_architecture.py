"""The arrows allowed between the parts of the house (docs/architecture.md), checked against the
imports of the code. Owns no behaviour; it fails when an import crosses a line it must not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "pybkx"
CORE = ROOT / "rust" / "core"

# part -> the pybkx modules (prefixes) it may import; anything else of pybkx is forbidden.
ALLOWED: dict[str, tuple[str, ...]] = {
    "config": ("pybkx.config", "pybkx.errors"),
    "errors": (),
    "meta": ("pybkx.meta", "pybkx.config", "pybkx.errors"),
    "placement": ("pybkx.placement", "pybkx.config", "pybkx.errors"),
    "client": (
        "pybkx.client",
        "pybkx.meta",
        "pybkx.placement",
        "pybkx.config",
        "pybkx.errors",
        "pybkx._core",
    ),
    "recovery": (
        "pybkx.recovery",
        "pybkx.client",
        "pybkx.meta",
        "pybkx.placement",
        "pybkx.config",
        "pybkx.errors",
        "pybkx._core",
    ),
    "spark": (
        "pybkx.spark",
        "pybkx.client",
        "pybkx.meta",
        "pybkx.config",
        "pybkx.errors",
    ),
    "bookie": ("pybkx.bookie", "pybkx.meta", "pybkx.config", "pybkx.errors", "pybkx._core"),
    "tools": (
        "pybkx.tools",
        "pybkx.client",
        "pybkx.bookie",
        "pybkx.meta",
        "pybkx.config",
        "pybkx.errors",
        "pybkx._core",
    ),
    "admin": (
        "pybkx.admin",
        "pybkx.tools",
        "pybkx.client",
        "pybkx.bookie",
        "pybkx.meta",
        "pybkx.config",
        "pybkx.errors",
        "pybkx._core",
    ),
    "cli": (
        "pybkx.cli",
        "pybkx.recovery",
        "pybkx.tools",
        "pybkx.admin",
        "pybkx.bookie",
        "pybkx.config",
        "pybkx.errors",
        "pybkx._core",
    ),
}


def imports_of(path: Path) -> set[str]:
    """The absolute pybkx modules a Python file imports (at any depth, typing-only too)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("pybkx"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pybkx":  # from pybkx import errors
                found.update(f"pybkx.{a.name}" for a in node.names)
            elif node.module.startswith("pybkx"):
                found.add(node.module)
    return found


def part_files(part: str) -> list[Path]:
    folder = PACKAGE / part
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [PACKAGE / f"{part}.py"]


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_python_parts_import_only_what_they_may(part: str) -> None:
    allowed = ALLOWED[part]
    bad = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in part_files(part)
        for module in sorted(imports_of(path))
        if not any(module == a or module.startswith(a + ".") for a in allowed)
    ]
    assert not bad, "\n".join(bad)


def test_importing_pybkx_starts_no_thread_and_loads_no_backend() -> None:
    import subprocess
    import sys

    code = (
        "import sys, threading, pybkx\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "assert 'kazoo' not in sys.modules and 'sqlite3' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_rust_core_has_no_python_in_it() -> None:
    manifest = (CORE / "Cargo.toml").read_text()
    assert "pyo3" not in manifest
    sources = list((CORE / "src").rglob("*.rs"))
    assert sources
    assert not [p for p in sources if "pyo3" in p.read_text()]


RUST_NEVER = {
    "storage": ("server", "client", "ledger"),
    "ledger": ("server", "storage"),
    "client": ("server", "storage", "ledger"),
    "protocol": ("server", "storage", "client", "ledger"),
}


@pytest.mark.parametrize("part", sorted(RUST_NEVER))
def test_rust_parts_never_reach_upward(part: str) -> None:
    pattern = re.compile(r"crate::(" + "|".join(RUST_NEVER[part]) + r")\b")
    bad = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in sorted((CORE / "src" / part).rglob("*.rs"))
        for m in pattern.finditer(p.read_text())
    ]
    assert not bad, "\n".join(bad)


def test_nothing_under_storage_reaches_back_into_its_front() -> None:
    """No file under rust/core/src/storage/ but mod.rs names an item that storage/mod.rs defines
    or imports: the parts under the front reach each other through their own modules, never up
    through it (the arrows inside the storage room run one way). Tests may."""
    storage = CORE / "src" / "storage"
    front = re.sub(r"//[^\n]*", "", (storage / "mod.rs").read_text())
    modules = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", front, re.M))
    names = {"Inner", "*"} | set(
        re.findall(
            r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait|type|fn|const|static)\s+(\w+)",
            front,
            re.M,
        )
    )
    for used in re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", front, re.M):
        names |= set(re.findall(r"(\w+)\s*(?:[,}]|$)", used.strip()))
    names -= modules
    bad = []
    for path in sorted(storage.rglob("*.rs")):
        if path == storage / "mod.rs" or path.name == "tests.rs":
            continue
        text = re.sub(r"//[^\n]*", "", path.read_text()).split("#[cfg(test)]\nmod tests {")[0]
        # `super` repeated this many times names storage/mod.rs from this file.
        depth = len(path.relative_to(storage).parts) - (path.name == "mod.rs")
        for prefix, target in re.findall(
            r"(crate::storage::|(?:super::)+)(\{[^}]*\}|\w+|\*)", text
        ):
            if prefix.startswith("super") and prefix.count("super") != depth:
                continue
            first = {item.strip().split("::")[0] for item in target.strip("{}").split(",")}
            bad += [f"{path.relative_to(ROOT)}: {prefix}{name}" for name in first & names]
    assert not bad, "\n".join(bad)
