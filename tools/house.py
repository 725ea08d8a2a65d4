"""Draws a package's house from its own imports: rooms, floors, arrows and cycles.

A room is one direct child of the package (a module, or a sub-package with everything under it); an
arrow is a pair of rooms where some module of the first imports some module of the second (imports
inside functions and under TYPE_CHECKING count: they are dependencies too); a room's floor is one more
than the highest floor it imports, so floor 1 imports no sibling; a cycle is a set of rooms that import
each other round. Migrations and tests are left out.

    .venv/bin/python tools/house.py webapp/runs webapp [--rooms] [--largest 10]

It reads the code as text (ast), so it runs on a checkout without installing anything.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_PARTS = {"migrations", "tests", "__pycache__"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if not SKIPPED_PARTS & set(p.relative_to(package).parts))


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports (a `from a import b` counts as `a.b` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    resolved = set()
    for name in found:
        while name and name not in known:  # `import a.b.c` of a module a.b with a name c
            name = name.rpartition(".")[0]
        if name and name != this:
            resolved.add(name)
    return resolved


def room_of(module: str, package: str) -> str | None:
    """The direct child of `package` that holds `module` (None outside it, or the package's own __init__)."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def house(package_dir: Path) -> dict:
    package = module_name(package_dir / "__init__.py")
    files = python_files(package_dir)
    all_known = {module_name(p) for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    rooms: dict[str, int] = defaultdict(int)  # room -> lines
    arrows: set[tuple[str, str]] = set()
    sizes = []
    for path in files:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        sizes.append((lines, path.relative_to(ROOT).as_posix()))
        room = room_of(module_name(path), package)
        if room is None:
            continue
        rooms[room] += lines
        for target in imported_modules(path, all_known):
            other = room_of(target, package)
            if other is not None and other != room:
                arrows.add((room, other))
    below: dict[str, set[str]] = defaultdict(set)
    for a, b in arrows:
        below[a].add(b)
    cycles = strongly_connected(list(rooms), below)
    floors: dict[str, int] = {}

    def floor(room: str, seen: frozenset = frozenset()) -> int:
        if room in floors:
            return floors[room]
        if room in seen:  # inside a cycle: its rooms share a floor
            return 0
        result = 1 + max((floor(b, seen | {room}) for b in below[room]), default=0)
        floors[room] = result
        return result

    for room in rooms:
        floor(room)
    return {"package": package, "rooms": dict(rooms), "arrows": arrows, "floors": floors,
            "cycles": [c for c in cycles if len(c) > 1], "lines": sum(rooms.values()), "sizes": sorted(sizes, reverse=True)}


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the sets of rooms that reach each other."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="+", help="package folders, e.g. webapp/runs")
    parser.add_argument("--rooms", action="store_true", help="list each room with its floor, lines and arrows out")
    parser.add_argument("--largest", type=int, default=0, help="also list the N largest files")
    args = parser.parse_args()
    for folder in args.packages:
        drawn = house(ROOT / folder)
        top = max(drawn["floors"].values(), default=0)
        print(f"{folder}: {len(drawn['rooms'])} rooms on {top} floors, {len(drawn['arrows'])} arrows, "
              f"{len(drawn['cycles'])} cycles, {drawn['lines']:,} lines")
        for cycle in drawn["cycles"]:
            print("  cycle: " + " -> ".join(cycle))
        if args.rooms:
            for room, level in sorted(drawn["floors"].items(), key=lambda item: (-item[1], item[0])):
                out = sorted(b for a, b in drawn["arrows"] if a == room)
                print(f"  floor {level}  {room} ({drawn['rooms'][room]} lines) -> {', '.join(out) or '-'}")
        for lines, path in drawn["sizes"][: args.largest]:
            print(f"  {lines:>5}  {path}")


if __name__ == "__main__":
    main()
