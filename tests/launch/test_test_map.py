# tests/launch/test_test_map.py owns the rule that every source file with logic (src/**/*.cc,
# kernels/*.cu) has tests, findable from the file (docs/design.md "Testing"). A source file is
# covered directly when a test is named after it (x_test.cc, test_x.py) or a test file includes
# its header (x.h / x.cuh); a file covered only through other code (a CLI command, a value mode
# checked against the reference) has a line in tests/test_map.json naming the tests that cover it
# and what they check. The table is checked both ways: every source file is covered, every test
# it names exists, no line names a source that is gone or one that is already covered directly
# (the table lists only what cannot be found otherwise).
import json
import os
import re
from pathlib import Path

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
TABLE = ROOT / "tests" / "test_map.json"
INCLUDE = re.compile(r'#\s*include\s+"([^"]+)"')


def sources(root):
    found = sorted(p.relative_to(root).as_posix() for p in (root / "src").rglob("*.cc"))
    found += sorted(p.relative_to(root).as_posix() for p in (root / "kernels").glob("*.cu"))
    return found


def list_test_files(root):
    return sorted(p for p in (root / "tests").rglob("*")
                  if p.is_file() and p.suffix in (".cc", ".h", ".py") and "__pycache__" not in p.parts)


def header_of(source):
    if source.startswith("src/"):
        return source[len("src/"):].rsplit(".", 1)[0] + ".h"
    return source.rsplit(".", 1)[0] + ".cuh"  # kernels/x.cu -> kernels/x.cuh


def direct_tests(root):
    """{source: [tests that are named after it or include its header]}."""
    tests = list_test_files(root)
    includes = {}
    for t in tests:
        includes[t] = set(INCLUDE.findall(t.read_text(errors="replace")))
    out = {}
    for s in sources(root):
        base = Path(s).stem
        h = header_of(s)
        hits = [t.relative_to(root).as_posix() for t in tests
                if t.name.startswith(base + "_test.") or t.name == f"test_{base}.py" or h in includes[t]]
        out[s] = hits
    return out


def check(root):
    table = json.loads((root / "tests" / "test_map.json").read_text())
    direct = direct_tests(root)
    errors = []
    for s, hits in direct.items():
        if not hits and s not in table:
            errors.append(f"{s}: no test is named after it or includes {header_of(s)}, and "
                          "tests/test_map.json has no line for it: write its test, or name the "
                          "tests that cover it there")
    for s, line in sorted(table.items()):
        if s not in direct:
            errors.append(f"tests/test_map.json names {s}, which is not a source file (moved? gone?)")
            continue
        if direct[s]:
            errors.append(f"tests/test_map.json names {s}, which {direct[s][0]} covers directly: "
                          "remove the line")
        if not line.get("tests") or not line.get("what"):
            errors.append(f"tests/test_map.json: {s} needs 'tests' and 'what'")
        for t in line.get("tests", []):
            if not (root / t).is_file():
                errors.append(f"tests/test_map.json: {s} names {t}, which does not exist")
    return errors


def test_every_source_file_has_tests():
    errors = check(ROOT)
    assert not errors, "\n".join(errors)


def test_the_check_finds_an_uncovered_file_a_stale_line_and_a_missing_test(tmp_path):
    (tmp_path / "src/core").mkdir(parents=True)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "tests/unit").mkdir(parents=True)
    (tmp_path / "src/core/ops.cc").write_text("// ops\n")
    (tmp_path / "src/core/flags.cc").write_text("// flags\n")
    (tmp_path / "kernels/rope.cu").write_text("// rope\n")
    (tmp_path / "tests/unit/flags_test.cc").write_text("// named after flags.cc\n")
    (tmp_path / "tests/unit/rope_check.cc").write_text('#include "kernels/rope.cuh"\n')
    table = {"src/core/ops.cc": {"tests": ["tests/unit/flags_test.cc"], "what": "x"}}
    (tmp_path / "tests/test_map.json").write_text(json.dumps(table))
    assert check(tmp_path) == []
    (tmp_path / "src/core/rng.cc").write_text("// uncovered\n")
    table["src/core/gone.cc"] = {"tests": ["tests/unit/flags_test.cc"], "what": "x"}
    table["src/core/flags.cc"] = {"tests": ["tests/unit/nothere_test.cc"], "what": "x"}
    (tmp_path / "tests/test_map.json").write_text(json.dumps(table))
    errors = "\n".join(check(tmp_path))
    assert "src/core/rng.cc: no test" in errors
    assert "names src/core/gone.cc, which is not a source file" in errors
    assert "names src/core/flags.cc, which tests/unit/flags_test.cc covers directly" in errors
    assert "tests/unit/nothere_test.cc, which does not exist" in errors
