#!/usr/bin/env python3
"""Fails when a source file includes a header from a folder above its own.

The folders of src/ form a one-way stack (docs/architecture.md, "The stack"): each may
include only its own headers and those of the folders it stands on. Public headers
(include/tccl/*.hpp) belong to the layer that implements them. Run by CTest
(lint.layers) and by hand: python3 scripts/check_layers.py [repo root].
"""
import pathlib
import re
import sys

# folder -> the folders it may include (besides itself). Transitive closure is applied.
STACK = {
    "base": [],
    "auth": ["base"],
    "net": ["base"],
    "reduce": ["base"],
    "algorithms": ["base"],
    "store": ["base", "net", "auth"],
    "transport": ["base", "net", "auth", "store"],
    "exec": ["base", "transport", "algorithms", "reduce"],
    "core": ["base", "exec", "algorithms", "transport", "store", "net", "auth", "reduce"],
    # Above the library: anything below.
    # The simulator (sim/, docs/simulate.md): replays the algorithms' schedules on
    # SimGrid; it needs the schedules, never a socket.
    "sim": ["algorithms"],
    "tools": ["core", "sim"],
    "python": ["core"],
    "tests": ["core", "tools", "sim"],
    "bench": ["core"],
    "examples": ["core"],
}
# Public headers and the layer each belongs to.
PUBLIC = {
    "types.hpp": "base", "error.hpp": "base", "stats.hpp": "base", "half.hpp": "base",
    "version.hpp": "base", "store.hpp": "store", "work.hpp": "core",
    "communicator.hpp": "core", "bucketer.hpp": "core", "tccl.hpp": "core",
}


def closure(layer, seen=None):
    seen = set() if seen is None else seen
    for dep in STACK[layer]:
        if dep not in seen:
            seen.add(dep)
            closure(dep, seen)
    return seen | {layer}


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors = []
    checked = 0
    sources = []
    for p in (root / "src").rglob("*"):
        if p.suffix in (".cpp", ".hpp"):
            sources.append((p, p.relative_to(root / "src").parts[0]))
    for p in (root / "include" / "tccl").glob("*.hpp"):
        sources.append((p, PUBLIC.get(p.name, "core")))
    for top in ("sim", "tools", "python", "tests", "bench", "examples"):
        for p in (root / top).rglob("*"):
            if p.suffix in (".cpp", ".hpp", ".h", ".cc"):
                sources.append((p, top))
    for path, layer in sources:
        if layer not in STACK:
            errors.append(f"{path.relative_to(root)}: folder '{layer}' is not in the stack")
            continue
        allowed = closure(layer)
        for m in INCLUDE.finditer(path.read_text(errors="replace")):
            inc = m.group(1)
            parts = inc.split("/")
            if len(parts) < 2:
                continue  # same-folder or local header
            if parts[0] == "tccl":
                target = PUBLIC.get(parts[1], "core")
            elif parts[0] in STACK and ((root / "src" / parts[0]).is_dir()
                                        or (root / parts[0]).is_dir()):
                target = parts[0]
            else:
                continue
            checked += 1
            if target not in allowed:
                line = path.read_text(errors="replace")[: m.start()].count("\n") + 1
                errors.append(f"{path.relative_to(root)}:{line}: '{layer}' may not include "
                              f"\"{inc}\" (layer '{target}' stands above it)")
    for e in errors:
        print(e)
    print(f"check_layers: {checked} includes checked, {len(errors)} forbidden")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
