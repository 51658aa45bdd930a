"""Helpers for the CORE evaluation tests: the build directory and a writer of eval bundles in the
format of DCLM's / nanochat's eval_bundle (core.yaml, eval_meta_data.csv, eval_data/)."""
import json
import os
from pathlib import Path

BUILD = Path(os.environ.get("VTRAIN_BUILD", Path(__file__).resolve().parents[2] / "build"))


def write_bundle(root, tasks):
    """tasks: list of dicts label, type, shots, delimiter (None: the default), baseline, data."""
    root = Path(root)
    (root / "eval_data" / "sub").mkdir(parents=True, exist_ok=True)
    with open(root / "core.yaml", "w") as f:
        f.write("# CORE task list, written by a test\nicl_tasks:\n")
        for k, t in enumerate(tasks):
            # both list-item styles of the real file: "- label: x" and "-\n  label: x"
            f.write(f"-\n  label: {t['label']}\n" if k % 2 else f"- label: {t['label']}\n")
            f.write(f"  dataset_uri: sub/{t['label']}.jsonl  # relative to eval_data/\n")
            f.write(f"  num_fewshot: [{t['shots']}]\n  icl_task_type: {t['type']}\n")
            if t.get("delimiter") is not None:
                f.write(f"  continuation_delimiter: {json.dumps(t['delimiter'])}\n")
            with open(root / "eval_data" / "sub" / f"{t['label']}.jsonl", "w") as g:
                for x in t["data"]:
                    g.write(json.dumps(x) + "\n")
    with open(root / "eval_meta_data.csv", "w") as f:
        f.write("Eval Task,Task Category,Task Type,#shots,#datapoints,Random baseline,Centered Metric?,Description\n")
        for t in tasks:
            f.write(f'{t["label"]},test,"{t["type"]}, made here",{t["shots"]},{len(t["data"])},'
                    f'{t["baseline"]},,"a test task, with commas"\n')
    return root
