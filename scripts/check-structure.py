#!/usr/bin/env python3
"""Structure checks for the sluice library and the CLI crate, run by `make lint`
(and so by CI).

1. No import cycle between the library's modules: the top-level modules
   (`artifact`, `registry`, `lake`, ...) form a DAG, and so do the direct
   submodules inside each of them (`pipeline::plan`, `pipeline::worker`, ...).
   An edge A -> B is any `crate::B` or `super::B` path written in A, in `use`
   lines or inline, outside `#[cfg(test)]` modules.
2. No function longer than MAX_FN_LINES lines (tests excluded).

Exit status 1 with a list of what is wrong; 0 when clean.
"""
import pathlib
import re
import sys

WORKSPACE = pathlib.Path(__file__).resolve().parent.parent
CRATES = [WORKSPACE / "crates" / "sluice" / "src", WORKSPACE / "crates" / "sluice-cli" / "src"]
MAX_FN_LINES = 120


def module_path(root: pathlib.Path, path: pathlib.Path) -> list[str]:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def strip_tests(text: str) -> str:
    """Drop `#[cfg(test)] mod ... { ... }` blocks and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text[i:])
        if not m:
            out.append(text[i:])
            break
        start = i + m.start()
        out.append(text[i:start])
        depth, j = 0, i + m.end() - 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        i = j + 1
    return "".join(out)


def references(parts: list[str], text: str) -> set[tuple[str, ...]]:
    """Absolute module paths this file names (as far as two levels)."""
    refs = set()
    for m in re.finditer(r"\bcrate::((?:\w+::)*\w+)", text):
        refs.add(tuple(m.group(1).split("::")[:2]))
    for m in re.finditer(r"\b((?:super::)+)((?:\w+::)*\w+)", text):
        ups = m.group(1).count("super::")
        # A file `a/b.rs` is module a::b; `super` is `a`. A `mod.rs` is its
        # folder's module, so `super` goes one further up from it.
        base = parts[: len(parts) - ups]
        refs.add(tuple((base + m.group(2).split("::"))[:2]))
    # `use` groups: `use crate::{a::x, b::y}` / `use super::{a, b}`.
    for m in re.finditer(r"\buse\s+(crate|(?:super::)*super)::\{([^;]*)\};", text):
        head = m.group(1)
        if head == "crate":
            base = []
        else:
            base = parts[: len(parts) - head.count("super")]
        for item in re.split(r",", m.group(2)):
            item = item.strip().lstrip("{").strip()
            if item:
                refs.add(tuple((base + item.split("::"))[:2]))
    return refs


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def long_functions(path: pathlib.Path, text: str) -> list[str]:
    text = strip_tests(text)
    lines = text.split("\n")
    out = []
    fn = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")
    i = 0
    while i < len(lines):
        m = fn.match(lines[i])
        if not m:
            i += 1
            continue
        depth, j, opened = 0, i, False
        while j < len(lines):
            depth += lines[j].count("{") - lines[j].count("}")
            if "{" in lines[j]:
                opened = True
            if opened and depth <= 0:
                break
            if not opened and lines[j].rstrip().endswith(";"):
                break
            j += 1
        length = j - i + 1
        if opened and length > MAX_FN_LINES:
            out.append(f"{path.relative_to(WORKSPACE)}: fn {m.group(6)} is {length} lines (max {MAX_FN_LINES})")
        i += 1
    return out


def check(root: pathlib.Path) -> tuple[list[str], int]:
    """Problems of one crate's source tree, and how many files it has."""
    top: dict[str, set[str]] = {}
    inner: dict[str, dict[str, set[str]]] = {}
    problems: list[str] = []
    files = sorted(root.rglob("*.rs"))
    top_modules = {module_path(root, p)[0] for p in files if module_path(root, p)}
    for path in files:
        raw = path.read_text()
        parts = module_path(root, path)
        problems.extend(long_functions(path, raw))
        if not parts:
            continue
        text = strip_tests(raw)
        for ref in references(parts, text):
            if not ref or ref[0] not in top_modules:
                continue
            if ref[0] != parts[0]:
                top.setdefault(parts[0], set()).add(ref[0])
            elif len(parts) >= 2 and len(ref) >= 2 and ref[1] != parts[1]:
                inner.setdefault(parts[0], {}).setdefault(parts[1], set()).add(ref[1])
    name = root.parent.name
    cycle = find_cycle(top)
    if cycle:
        problems.append(f"{name}: import cycle between top-level modules: " + " -> ".join(cycle))
    for module, graph in sorted(inner.items()):
        subs = {p.stem if p.stem != "mod" else p.parent.name for p in (root / module).glob("*")}
        graph = {k: {v for v in vs if v in subs} for k, vs in graph.items() if k in subs}
        cycle = find_cycle(graph)
        if cycle:
            problems.append(f"{name}: import cycle inside `{module}`: " + " -> ".join(cycle))
    return problems, len(files)


def main() -> int:
    problems: list[str] = []
    files = 0
    for root in CRATES:
        found, count = check(root)
        problems.extend(found)
        files += count
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"structure ok: {files} files in {len(CRATES)} crates, module graphs acyclic, no fn over {MAX_FN_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
