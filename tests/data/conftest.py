"""Shared helpers for the data pipeline's Python checks: locate and run build/data_tool."""
import json
import os
import subprocess
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("VTRAIN_BUILD", Path(__file__).resolve().parents[2] / "build"))


def tool_path():
    p = BUILD / "data_tool"
    if not p.exists():
        pytest.fail(f"{p} not found; build the project first (VTRAIN_BUILD={BUILD})")
    return str(p)


def run_tool(*args, check=True):
    """Runs data_tool; returns CompletedProcess (text mode). check=True asserts exit 0."""
    r = subprocess.run([tool_path(), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, f"data_tool {' '.join(map(str, args))} failed:\n{r.stderr}"
    return r


def run_tool_json_lines(*args):
    return [json.loads(line) for line in run_tool(*args).stdout.splitlines() if line.strip()]
