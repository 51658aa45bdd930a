# tests/launch/test_layering.py owns the checks of scripts/check_includes.py (the include graph's
# floors and circles, docs/design.md "Layout"): the real tree keeps the rules (no upward arrow, no
# circle outside KNOWN_CIRCLES, no directory without a floor), and on small synthetic trees the
# checker finds an upward arrow, a new circle, a folder with no floor and a listed circle that is
# gone, so the check on the real tree cannot pass by finding nothing.
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
SCRIPT = ROOT / "scripts" / "check_includes.py"


def load():
    spec = importlib.util.spec_from_file_location("check_includes", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(root, rel, *includes):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("// a file\n" + "".join(f'#include "{i}"\n' for i in includes))


def test_the_real_tree_keeps_the_rules():
    run = subprocess.run([sys.executable, str(SCRIPT), "--root", str(ROOT), "--report"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "upward arrows: 0" in run.stdout
    # It looked at the whole tree, not at an empty one.
    files = int(run.stdout.split(" files")[0])
    assert files > 150, run.stdout


def test_an_upward_arrow_is_refused(tmp_path):
    mod = load()
    mod.KNOWN_CIRCLES = set()
    write(tmp_path, "src/core/ops.h")
    write(tmp_path, "src/optim/adamw.h", "core/ops.h")
    assert mod.check(str(tmp_path)) == []
    write(tmp_path, "src/core/cpu_backend.cc", "core/ops.h", "optim/adamw.h")
    errors = mod.check(str(tmp_path))
    assert len(errors) == 1 and "core/cpu_backend.cc includes optim/adamw.h" in errors[0]
    assert "upward arrow" in errors[0]


def test_a_new_circle_is_refused_and_a_gone_one_must_leave_the_list(tmp_path):
    mod = load()
    mod.KNOWN_CIRCLES = set()
    write(tmp_path, "src/model/gpt.h")
    write(tmp_path, "src/model/gpt.cc", "model/gpt.h", "model/kit.h")
    write(tmp_path, "src/model/kit.h", "model/gpt.h")
    errors = mod.check(str(tmp_path))
    assert len(errors) == 1 and "model/gpt <-> model/kit" in errors[0], errors
    mod.KNOWN_CIRCLES = {("model/gpt", "model/kit")}
    assert mod.check(str(tmp_path)) == []
    (tmp_path / "src/model/kit.h").write_text("// no includes now\n")
    errors = mod.check(str(tmp_path))
    assert len(errors) == 1 and "gone" in errors[0], errors


def test_a_folder_without_a_floor_is_refused(tmp_path):
    mod = load()
    mod.KNOWN_CIRCLES = set()
    write(tmp_path, "src/core/tensor.h")
    write(tmp_path, "src/newthing/x.cc", "core/tensor.h")
    errors = mod.check(str(tmp_path))
    assert len(errors) == 1 and "'newthing' has no floor" in errors[0], errors

