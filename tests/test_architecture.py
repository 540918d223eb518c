"""The arrows allowed between the parts of the house (docs/architecture.md), checked against the
imports of the code. Owns no behaviour; it fails when an import crosses a line it must not."""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "pybkx"
CORE = ROOT / "rust" / "core"

DOC = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Part:
    """One row of docs/architecture.md's parts table."""

    name: str
    paths: tuple[str, ...]
    """Repository paths: folders end in ``/``; ``*`` matches within one folder."""
    uses: tuple[str, ...]
    """Names of the other parts it may import (normalised)."""


def _norm(name: str) -> str:
    name = re.sub(r"\(.*?\)", "", name).strip().lower()
    return name.removeprefix("the ").strip()


def parts_table() -> list[Part]:
    """The parts and their allowed arrows, read from docs/architecture.md."""
    text = DOC.read_text()
    section = text.split("## The parts and the arrows allowed between them", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| Part | Folder | Owns | Uses |"), rows[0]
    parts = []
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 4:
            break  # the next table
        name, folder, _owns, uses = cells
        paths = tuple(
            p for p in re.findall(r"`([^`]+)`", folder) if p.startswith(("python/", "rust/"))
        )
        assert paths, f"row {name!r} names no path"
        uses = re.sub(r"\(.*?\)", "", uses)  # remarks in parentheses are not parts
        used = () if _norm(uses) == "nothing" else tuple(_norm(u) for u in uses.split(","))
        parts.append(Part(_norm(name), paths, used))
    names = {p.name for p in parts}
    for p in parts:
        unknown = [u for u in p.uses if u not in names and u != "every core part"]
        assert not unknown, f"{p.name} uses unknown parts {unknown}"
    return parts


def _matches(path: str, pattern: str) -> int:
    """How specific the match of ``pattern`` to ``path`` is (0: none)."""
    if pattern.endswith("/"):
        return len(pattern) if path.startswith(pattern) else 0
    return (
        len(pattern)
        if fnmatch.fnmatchcase(path, pattern)
        and "/" not in path[len(pattern.rsplit("/", 1)[0]) + 1 :]
        else 0
    )


def part_of(path: str, parts: list[Part]) -> Part | None:
    """The part whose most specific path holds ``path`` (a repository path)."""
    best = max(parts, key=lambda p: max(_matches(path, pat) for pat in p.paths))
    return best if max(_matches(path, pat) for pat in best.paths) else None


def allowed(part: Part, parts: list[Part]) -> set[str]:
    if "every core part" in part.uses:
        return {p.name for p in parts if any(x.startswith("rust/core/") for x in p.paths)} | {
            part.name
        }
    return {part.name, *part.uses}


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


def module_file(module: str) -> str:
    """The repository path of a pybkx module (a package's ``__init__.py``, the binding's stub)."""
    base = "python/" + module.replace(".", "/")
    for candidate in (base + ".py", base + ".pyi", base + "/__init__.py"):
        if (ROOT / candidate).exists():
            return candidate
    raise AssertionError(f"no file for {module}")


def python_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py*") if p.suffix in (".py", ".pyi"))


def test_every_python_module_belongs_to_a_part() -> None:
    parts = parts_table()
    lost = [
        str(p.relative_to(ROOT))
        for p in python_files()
        if not part_of(str(p.relative_to(ROOT)), parts)
    ]
    assert not lost, f"no row of docs/architecture.md holds: {lost}"


def test_python_parts_import_only_what_the_table_allows() -> None:
    parts = parts_table()
    bad = []
    for path in python_files():
        rel = str(path.relative_to(ROOT))
        source = part_of(rel, parts)
        assert source is not None, rel
        may = allowed(source, parts)
        for module in sorted(imports_of(path)):
            target = part_of(module_file(module), parts)
            if target is None or target.name not in may:
                bad.append(f"{rel} ({source.name}) imports {module} ({target and target.name})")
    assert not bad, "\n".join(bad)


def core_modules() -> tuple[set[str], set[str]]:
    """The core crate's top-level modules, and those compiled for tests only."""
    lib = (CORE / "src" / "lib.rs").read_text()
    modules = set(re.findall(r"^\s*(?:pub(?:\(crate\))? )?mod (\w+);", lib, re.M))
    test_only = set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\(crate\))? )?mod (\w+);", lib))
    return modules, test_only


def core_module_path(module: str) -> str:
    folder = CORE / "src" / module
    return f"rust/core/src/{module}/" if folder.is_dir() else f"rust/core/src/{module}.rs"


def test_rust_parts_use_only_what_the_table_allows() -> None:
    parts = parts_table()
    modules, test_only = core_modules()
    bad = []
    for path in sorted((CORE / "src").rglob("*.rs")):
        rel = str(path.relative_to(ROOT))
        if rel == "rust/core/src/lib.rs" or any(
            rel.startswith(core_module_path(m).removesuffix(".rs")) for m in test_only
        ):
            continue
        source = part_of(rel, parts)
        assert source is not None, f"no row of docs/architecture.md holds {rel}"
        may = allowed(source, parts)
        for used in sorted(set(re.findall(r"\bcrate::(\w+)", path.read_text()))):
            if used not in modules or used in test_only:
                continue  # a macro exported at the crate root, or test fixtures
            target = part_of(core_module_path(used), parts)
            if target is None or target.name not in may:
                bad.append(f"{rel} ({source.name}) uses crate::{used} ({target and target.name})")
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


#: The read engine's layers, top first: each file may use only the files after it
#: (docs/architecture.md, the Ledger engine row).
READER_LAYERS = ("mod", "batch", "single", "window", "fetch", "race", "order", "verify", "plan")


def test_the_read_engine_is_layered_one_way() -> None:
    reader = CORE / "src" / "ledger" / "reader"
    files = {p.stem for p in reader.glob("*.rs")} - {"tests"}
    assert files == set(READER_LAYERS), (
        f"a reader file without a layer: {files ^ set(READER_LAYERS)}"
    )
    bad = []
    for i, layer in enumerate(READER_LAYERS):
        text = re.sub(r"//[^\n]*", "", (reader / f"{layer}.rs").read_text())
        text = text.split("#[cfg(test)]")[0]
        for used in set(re.findall(r"\b(?:super|self)::(\w+)", text)):
            if used in READER_LAYERS and READER_LAYERS.index(used) <= i and used != layer:
                bad.append(f"ledger/reader/{layer}.rs uses {used}.rs above it")
    assert not bad, "\n".join(bad)
