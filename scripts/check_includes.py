#!/usr/bin/env python3
"""The include graph's rules (docs/design.md, "Layout"), checked by CI (tests/launch/test_layering.py).

1. Layers. Every directory of src/ (and kernels/) has a floor; a file may include only its own
   directory or a lower floor. An include that goes up a floor (core -> optim, train -> cli) is an
   error, and so is a directory that has no floor yet: add it to LAYERS, where it belongs.
2. Circles. A module is a header and its source (x.h + x.cc, or x.cuh + x.cu); module A uses
   module B when a file of A includes B's header. Modules that reach each other (a strongly
   connected component of more than one module) form a circle. A circle that is not in
   KNOWN_CIRCLES is an error; a circle in KNOWN_CIRCLES that no longer exists is an error too (so
   the list only shrinks; the aim is an empty list).

  python3 scripts/check_includes.py            # exit 0 when the rules hold, 1 with the reasons
  python3 scripts/check_includes.py --report   # also the graph's numbers (arrows per floor pair)
"""
import argparse
import collections
import os
import re
import sys

# Floors, lowest first. A directory may include its own floor and anything below it. kernels/
# (the CUDA kernels) and src/core (tensors, ops and their backends) share the lowest floor: an
# op's CPU kernel, checks and device launch are one concept.
LAYERS = [("kernels", "core"), ("parallel",), ("model",), ("pipeline",), ("data",), ("optim",),
          ("eval",), ("checkpoint",), ("plan",), ("train",), ("cli",)]
ORDER = " < ".join("+".join(floor) for floor in LAYERS)

# Circles that exist today and are to be taken apart; each is a sorted tuple of modules.
KNOWN_CIRCLES = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".h", ".cc", ".cuh", ".cu")


def scan(root):
    """Returns {file (relative to the src root or 'kernels/...'): [included paths that exist]}."""
    files = {}
    for top in ("src", "kernels"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.join(root, "src")) if top == "src" else \
                    os.path.relpath(path, root)
                incs = []
                with open(path, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        here = os.path.dirname(rel)
                        for cand in (target, os.path.normpath(os.path.join(here, target))):
                            base = os.path.join(root, cand if cand.startswith("kernels/") else
                                                os.path.join("src", cand))
                            if os.path.isfile(base):
                                incs.append(cand)
                                break
                files[rel] = incs
    return files


def module_of(rel):
    return rel.rsplit(".", 1)[0]


def floor_of(rel):
    return rel.split("/", 1)[0] if "/" in rel else ""


def circles(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(tuple(sorted(comp)))
    return sorted(out)


def check(root, report=False):
    files = scan(root)
    errors = []
    arrows = collections.Counter()
    graph = collections.defaultdict(set)
    rank = {name: i for i, floor in enumerate(LAYERS) for name in floor}
    for rel, incs in sorted(files.items()):
        src_floor = floor_of(rel)
        if src_floor not in rank:
            errors.append(f"{rel}: directory '{src_floor}' has no floor in LAYERS "
                          f"(scripts/check_includes.py)")
            continue
        for inc in incs:
            dst_floor = floor_of(inc)
            if dst_floor not in rank:
                errors.append(f"{rel} includes {inc}: directory '{dst_floor}' has no floor")
                continue
            if dst_floor != src_floor:
                arrows[(src_floor, dst_floor)] += 1
            if rank[dst_floor] > rank[src_floor]:
                errors.append(f"{rel} includes {inc}: an upward arrow ({src_floor} sits below "
                              f"{dst_floor}; order: {ORDER})")
            a, b = module_of(rel), module_of(inc)
            if a != b:
                graph[a].add(b)
    found = circles(graph)
    for c in found:
        if c not in KNOWN_CIRCLES:
            errors.append("include circle: " + " <-> ".join(c) +
                          " (modules that include each other; break it, e.g. move the shared "
                          "declarations into a header of their own)")
    for c in sorted(KNOWN_CIRCLES - set(found)):
        errors.append("KNOWN_CIRCLES lists a circle that is gone (good): remove it from "
                      "scripts/check_includes.py: " + " <-> ".join(c))
    if report:
        print(f"{len(files)} files, {len(graph)} modules with includes")
        for (a, b), n in sorted(arrows.items()):
            print(f"  {a:>10} -> {b:<10} {n}")
        upward = sum(1 for e in errors if "upward arrow" in e)
        print(f"upward arrows: {upward}; circles: {len(found)} "
              f"({sum(len(c) for c in found)} modules)")
        for c in found:
            print("  circle: " + " <-> ".join(c))
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--report", action="store_true", help="print the graph's numbers")
    args = ap.parse_args()
    errors = check(os.path.abspath(args.root), args.report)
    for e in errors:
        print("error: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
