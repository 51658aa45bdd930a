"""Module-level include circles of src/ (docs/design.md, "Layout"): a module is x.h + x.cc (the
path without its extension, relative to src/), with an arrow A -> B when a file of A includes B's
header. Prints each strongly connected component of more than one module, optionally only among
the modules under a prefix (`python3 scripts/include_circles.py model/`); exits 1 when there is
one.
"""
import os
import re
import sys


def modules(src):
    mods = {}
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith((".h", ".cc")):
                path = os.path.relpath(os.path.join(d, f), src)
                mods.setdefault(os.path.splitext(path)[0], []).append(os.path.join(d, f))
    return mods


def arrows(mods):
    include = re.compile(r'\s*#\s*include\s+"([^"]+)"')
    out = {m: set() for m in mods}
    for m, files in mods.items():
        for f in files:
            with open(f, encoding="utf-8") as fh:
                for line in fh:
                    g = include.match(line)
                    if g:
                        t = os.path.splitext(g.group(1))[0]
                        if t in mods and t != m:
                            out[m].add(t)
    return out


def circles(edges, selected):
    """Tarjan's strongly connected components of the graph restricted to `selected`."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in selected:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(selected):
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    prefix = sys.argv[1] if len(sys.argv) > 1 else ""
    mods = modules(root)
    selected = {m for m in mods if m.startswith(prefix)}
    found = circles(arrows(mods), selected)
    print(f"{len(found)} circle(s) among {len(selected)} modules under src/{prefix}")
    for c in found:
        print(f"  {len(c)} modules: " + " ".join(c))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
