"""The CORE evaluation (DCLM CORE as nanochat's core_eval.py computes it).
1. Python's random module, which picks nanochat's shuffles and few-shot examples, is reproduced bit
   for bit (compared with CPython here).
2. A fixture of hand-computed cases (bytes tokenizer, so tokens are bytes) pins the prompt
   rendering of every task type and several delimiters, the scored spans and the left-cropping.
3. A tiny model trained here on a corpus of facts must answer every task of a bundle written here
   (multiple_choice with two delimiters and few-shot, schema, language_modeling with two
   delimiters), from `train --core-every` into metrics.jsonl and from `vtrain eval --core` on
   dp/tp/pp layouts under mpirun and on the emulated device, with the same counts everywhere; the
   same model after one step must not."""
import json
import os
import random
import re
import subprocess

import pytest

from conftest import BUILD, write_bundle

VTRAIN = str(BUILD / "vtrain")
CORE_TOOL = str(BUILD / "core_tool")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")


def run(cmd, ok=True):
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=ENV, timeout=600)
    if ok:
        assert r.returncode == 0, f"{' '.join(map(str, cmd))}:\n{r.stdout}\n{r.stderr}"
    return r


def test_python_random_is_reproduced():
    for seed in [0, 1, 1337, 1234 + 57, 2**33 + 5]:
        for n in [0, 1, 2, 7, 100, 1001]:
            want = list(range(n))
            random.Random(seed).shuffle(want)
            got = json.loads(run([CORE_TOOL, "pyrandom", "--seed", seed, "--shuffle", n]).stdout)
            assert got == want, (seed, n)
        for n, k in [(5, 3), (21, 5), (22, 5), (30, 10), (86, 10), (85, 10), (1000, 25)]:
            want = random.Random(seed).sample(range(n), k)
            got = json.loads(run([CORE_TOOL, "pyrandom", "--seed", seed, "--sample", n, k]).stdout)
            assert got == want, (seed, n, k)


# --- 2. the prompt fixture ------------------------------------------------------------------------

MC2 = [{"query": f"Question {i}: which?", "choices": [f"{c}{i}" for c in "xyz"], "gold": i % 3} for i in range(5)]
SCHEMA = [{"context_options": ["The cat", "A dog"], "continuation": f"ran {i}", "gold": i % 2} for i in range(3)]
LM = [{"context": f"\u00a0 What is up {i}?\u3000 ", "continuation": f" sky{i}"} for i in range(3)]
FIXTURE = [
    dict(label="mc0", type="multiple_choice", shots=0, delimiter=None, baseline=50,
         data=[{"query": "Q: 2+2=", "choices": ["4", "five"], "gold": 0}]),
    dict(label="mc2", type="multiple_choice", shots=2, delimiter="\nAnswer: ", baseline=33.3, data=MC2),
    dict(label="schema1", type="schema", shots=1, delimiter=" ", baseline=50, data=SCHEMA),
    dict(label="lm1", type="language_modeling", shots=1, delimiter="\nA:", baseline=0, data=LM),
]


def expected_cases():
    """nanochat's rendering, restated by hand: shuffle(1337), shots = Random(1234+i).sample."""
    out = []
    for t in FIXTURE:
        data = list(t["data"])
        random.Random(1337).shuffle(data)
        d = " " if t["delimiter"] is None else t["delimiter"]
        for i, item in enumerate(data):
            shots = []
            if t["shots"]:
                shots = [data[j] for j in random.Random(1234 + i).sample([j for j in range(len(data)) if j != i], t["shots"])]
            if t["type"] == "multiple_choice":
                pre = "".join(f"{s['query']}{d}{s['choices'][s['gold']]}\n\n" for s in shots)
                prompts = [f"{pre}{item['query']}{d}{c}" for c in item["choices"]]
                common = len(f"{pre}{item['query']}{d}".encode())  # the choices differ in their first byte
                spans = [(1 + common, 1 + len(p.encode())) for p in prompts]
            elif t["type"] == "schema":
                pre = "".join(f"{s['context_options'][s['gold']]}{d}{s['continuation']}\n\n" for s in shots)
                prompts = [f"{pre}{o}{d}{item['continuation']}" for o in item["context_options"]]
                tail = len(f"{d}{item['continuation']}".encode())  # the options differ in their last byte
                spans = [(1 + len(p.encode()) - tail, 1 + len(p.encode())) for p in prompts]
            else:
                pre = "".join(f"{s['context'].strip()}{d}{s['continuation']}\n\n" for s in shots)
                without = f"{pre}{item['context'].strip()}{d}"
                prompts = [without.strip(), without + item["continuation"]]
                spans = [(1 + len(prompts[0].encode()), 1 + len(prompts[1].encode()))]
            rows = [[256] + list(p.encode()) for p in (prompts[1:] if t["type"] == "language_modeling" else prompts)]
            out.append(dict(task=t["label"], index=i, prompts=prompts, rows=rows, spans=spans,
                            gold=item.get("gold", 0)))
    return out


def test_prompt_rendering_and_spans(tmp_path):
    bundle = write_bundle(tmp_path / "bundle", FIXTURE)
    want = expected_cases()
    got = [json.loads(l) for l in run([CORE_TOOL, "prompts", "--core", bundle, "--tokenizer", "bytes"]).stdout.splitlines()]
    assert len(got) == len(want) == 1 + 5 + 3 + 3
    for g, w in zip(got, want):
        assert (g["task"], g["index"]) == (w["task"], w["index"])
        assert g["prompts"] == w["prompts"], w["task"]
        assert g["rows"] == w["rows"], w["task"]
        assert list(zip(g["start"], g["end"])) == w["spans"], w["task"]
        if w["task"] != "lm1":
            assert g["gold"] == w["gold"]
    # the LM prompts keep the delimiter's text but lose the context's Unicode whitespace
    lm = [g for g in got if g["task"] == "lm1"][0]
    assert "\u00a0" not in lm["prompts"][1] and "\u3000" not in lm["prompts"][1] and "\nA: sky" in lm["prompts"][1]
    # left-cropping to 12 tokens shifts the spans with the rows
    cropped = [json.loads(l) for l in run([CORE_TOOL, "prompts", "--core", bundle, "--seq-len", 12]).stdout.splitlines()]
    for g, w in zip(cropped, want):
        for row, (s, e), cs, ce in zip(w["rows"], w["spans"], g["start"], g["end"]):
            crop = max(0, len(row) - 12)
            assert (cs, ce) == (s - crop, e - crop)
        assert g["rows"] == [r[-12:] for r in w["rows"]]


def test_bundle_errors(tmp_path):
    bundle = write_bundle(tmp_path / "b", FIXTURE[:1])
    r = run([CORE_TOOL, "prompts", "--core", tmp_path / "nothing"], ok=False)
    assert r.returncode == 1 and "core.yaml" in r.stderr
    (bundle / "eval_meta_data.csv").write_text("Eval Task,Random baseline\nother,25\n")
    r = run([CORE_TOOL, "prompts", "--core", bundle], ok=False)
    assert r.returncode == 1 and "no row for task mc0" in r.stderr
    (bundle / "core.yaml").write_text("icl_tasks:\n- label: x\n  dataset_uri sub/x.jsonl\n")
    r = run([CORE_TOOL, "prompts", "--core", bundle], ok=False)
    assert r.returncode == 1 and "core.yaml:3" in r.stderr


# Hostile bundles (issue 25, item 12): each is refused naming the file, the line of a jsonl row,
# the field and its allowed range. (id, edit of a one-task bundle, message regex)
def _mc(**over):
    row = {"query": "Q: 2+2=", "choices": ["4", "five", "3"], "gold": 0}
    row.update(over)
    return row


def _task(data=None, **over):
    t = dict(label="mc0", type="multiple_choice", shots=0, delimiter=None, baseline=25,
             data=data if data is not None else [_mc(), _mc(query="Q: 1+1="), _mc(query="Q: 3+0=", gold=2)])
    t.update(over)
    return t


def _rows_with(bad, at=1):
    rows = [_mc(), _mc(query="Q: 1+1="), _mc(query="Q: 3+0=", gold=2)]
    rows.insert(at, bad)
    return rows


def _without_gold():
    r = _mc()
    del r["gold"]
    return r


BAD_BUNDLES = [
    # the reproductions
    ("gold-99", [_task(_rows_with(_mc(gold=99)))], r"mc0\.jsonl:2: multiple_choice example: field \"gold\" is 99, expected an integer index into \"choices\", in \[0, 2\]"),
    ("gold-neg", [_task(_rows_with(_mc(gold=-1)))], r"mc0\.jsonl:2: .*field \"gold\" is -1, expected an integer index into \"choices\", in \[0, 2\]"),
    ("gold-missing", [_task(_rows_with(_without_gold()))], r"mc0\.jsonl:2: .*field \"gold\" is missing, expected an integer index"),
    ("gold-string", [_task(_rows_with(_mc(gold="1")))], r"mc0\.jsonl:2: .*field \"gold\" is \"1\", expected an integer index"),
    ("baseline-100", [_task(baseline=100)], r"eval_meta_data\.csv line 2: \"Random baseline\" of task mc0 is 100, expected a percentage in \[0, 100\)"),
    ("baseline-nan", [_task(baseline="nan")], r"eval_meta_data\.csv line 2: \"Random baseline\" of task mc0 is nan, expected a percentage in \[0, 100\)"),
    ("fewshot-huge", [_task(shots="99999999999999")], r"core\.yaml: task mc0: num_fewshot is \[99999999999999\], expected \[k\] with an integer k in \[0, 1000\]"),
    ("uri-directory", "directory", r"dataset_uri sub names \S+, which is not a regular file"),
    # judgement calls
    ("gold-fraction", [_task(_rows_with(_mc(gold=1.5), at=3))], r"mc0\.jsonl:4: .*field \"gold\" is 1\.5, expected an integer index"),
    ("fewshot-negative", [_task(shots="-1")], r"num_fewshot is \[-1\], expected \[k\] with an integer k in \[0, 1000\]"),
    ("duplicate-task", [_task(), _task()], r"core\.yaml: icl_tasks items 1 and 2 both have label 'mc0'"),
    # variants
    ("baseline-negative", [_task(baseline=-5)], r"\"Random baseline\" of task mc0 is -5, expected a percentage in \[0, 100\)"),
    ("baseline-inf", [_task(baseline="inf")], r"\"Random baseline\" of task mc0 is inf"),
    ("gold-bool", [_task(_rows_with(_mc(gold=True)))], r"field \"gold\" is true, expected an integer index"),
    ("gold-huge", [_task(_rows_with(_mc(gold=2**64 - 1)))], r"field \"gold\" is 18446744073709551615"),
    ("choices-empty", [_task(_rows_with(_mc(choices=[])))], r"mc0\.jsonl:2: .*field \"choices\" is \[\], expected a non-empty list of texts"),
    ("choices-object", [_task(_rows_with(_mc(choices=["a", {"b": 1}])))], r"field \"choices\" item 1 is \{\"b\":1\}, expected text"),
    ("query-missing", [_task(_rows_with({"choices": ["a"], "gold": 0}))], r"field \"query\" is missing"),
    ("schema-gold", [_task([{"context_options": ["a", "b"], "continuation": "c", "gold": 2}] * 3, type="schema")], r"mc0\.jsonl:1: schema example: field \"gold\" is 2, expected an integer index into \"context_options\", in \[0, 1\]"),
    ("lm-continuation", [_task([{"context": "a", "continuation": None}] * 2, type="language_modeling")], r"mc0\.jsonl:1: language_modeling example: field \"continuation\" is null, expected text"),
    ("row-array", [_task(_rows_with([1, 2]))], r"mc0\.jsonl:2: not a JSON object"),
    ("fewshot-string", [_task(shots="'3'")], r"num_fewshot is \[\"3\"\], expected \[k\]"),
    ("fewshot-too-many", [_task(shots="1001")], r"num_fewshot is \[1001\], expected \[k\] with an integer k in \[0, 1000\]"),
    ("no-examples", [_task([])], r"mc0\.jsonl \(task mc0\) holds no examples"),
]


@pytest.mark.parametrize("case", BAD_BUNDLES, ids=[c[0] for c in BAD_BUNDLES])
def test_hostile_bundle_is_refused(tmp_path, case):
    name, tasks, pattern = case
    if tasks == "directory":
        bundle = write_bundle(tmp_path / "b", [_task()])
        text = (bundle / "core.yaml").read_text().replace("sub/mc0.jsonl", "sub")
        (bundle / "core.yaml").write_text(text)
    else:
        bundle = write_bundle(tmp_path / "b", tasks)
    before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    r = run([CORE_TOOL, "prompts", "--core", bundle], ok=False)
    assert r.returncode == 1, (name, r.stdout[-300:], r.stderr[-800:])
    assert re.search(pattern, r.stderr), (name, r.stderr[-800:])
    assert "exception" not in r.stderr and "what()" not in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()} == before


def test_long_rows_are_cropped_from_the_left_unless_the_continuation_does_not_fit(tmp_path):
    """A row longer than the sequence is cropped from the left, as nanochat does (the test
    above pins the spans); an example whose scored continuation does not fit in the context is
    refused, naming the file and line (docs/design.md, "CORE bundles")."""
    long_answer = "x" * 40
    bundle = write_bundle(tmp_path / "b", [_task([_mc(), _mc(query="Q", choices=[long_answer, "y"], gold=0), _mc(query="Q2")])])
    ok = run([CORE_TOOL, "prompts", "--core", bundle, "--seq-len", 64])
    assert len(ok.stdout.splitlines()) == 3
    r = run([CORE_TOOL, "prompts", "--core", bundle, "--seq-len", 30], ok=False)
    assert r.returncode == 1
    assert re.search(r"CORE task mc0, example \S+mc0\.jsonl:2: its scored continuation \(\d+ tokens\) does "
                     r"not fit in the 30-token context", r.stderr), r.stderr


# --- 3. a trained model ---------------------------------------------------------------------------

FACTS = [("sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"), ("sun", "yellow"), ("blood", "red")]
COLORS = [c for _, c in FACTS]
TINY = ["--layers", 2, "--dim", 64, "--heads", 2, "--seq-len", 64, "--window", 64, "--value", "bov",
        "--micro-batch", 8, "--warmup", 10, "--seed", 5]


def fact(s, c):
    return f"the {s} is {c}."


def qa(s, c):
    return f"Q: what color is the {s}?\nAnswer: {c}"


def model_tasks():
    def t(label, type_, shots, delim, baseline, data):
        return dict(label=label, type=type_, shots=shots, delimiter=delim, baseline=baseline, data=data)
    return [
        t("mc_space", "multiple_choice", 0, None, 100 / 6,
          [{"query": f"the {s} is", "choices": [x + "." for x in COLORS], "gold": i} for i, (s, c) in enumerate(FACTS)]),
        t("mc_answer", "multiple_choice", 2, "\nAnswer: ", 100 / 6,
          [{"query": f"Q: what color is the {s}?", "choices": COLORS, "gold": i} for i, (s, c) in enumerate(FACTS)]),
        t("schema_space", "schema", 1, " ", 100 / 6,
          [{"context_options": [f"the {x} is" for x, _ in FACTS], "continuation": c + ".", "gold": i}
           for i, (s, c) in enumerate(FACTS)]),
        t("lm_space", "language_modeling", 0, None, 0, [{"context": f"the {s} is ", "continuation": c} for s, c in FACTS]),
        t("lm_answer", "language_modeling", 3, "\nAnswer:", 0,
          [{"context": f"Q: what color is the {s}?", "continuation": " " + c} for s, c in FACTS]),
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("core")
    rng = random.Random(0)
    with open(d / "facts.jsonl", "w") as f:
        for _ in range(3000):
            style = fact if rng.random() < 0.5 else qa
            f.write(json.dumps({"text": "\n\n".join(style(*rng.choice(FACTS)) for _ in range(rng.randint(1, 4)))}) + "\n")
    run([VTRAIN, "prepare", "--input", d / "facts.jsonl", "--out", d / "data", "--tokenizer", "bpe:320", "--quiet"])
    bundle = write_bundle(d / "bundle", model_tasks())
    r = run([VTRAIN, "train", "--data", d / "data", *TINY, "--steps", 300, "--log-every", 100, "--ckpt-dir",
             d / "ck", "--metrics", d / "m.jsonl", "--core-every", 150, "--core", bundle, "--core-max-per-task", -1])
    run([VTRAIN, "train", "--data", d / "data", *TINY, "--steps", 1, "--ckpt-dir", d / "ck1"])
    return d, bundle, r


def core_lines(stdout):
    acc = {m.group(1): float(m.group(2)) for m in re.finditer(r"core: (\S+) .* accuracy ([0-9.]+)", stdout)}
    core = float(re.search(r"CORE metric: ([0-9.-]+)", stdout).group(1))
    return acc, core


def test_training_logs_core_and_the_model_answers_every_task(trained):
    d, bundle, r = trained
    rows = [json.loads(l) for l in open(d / "m.jsonl")]
    core = [x for x in rows if "core" in x]
    assert [x["step"] for x in core] == [150, 300]
    labels = [t["label"] for t in model_tasks()]
    assert sorted(core[-1]["core_accuracy"]) == sorted(labels)
    assert core[-1]["core_accuracy"] == {l: 1.0 for l in labels}, core[-1]
    assert core[-1]["core"] == pytest.approx(1.0)
    assert "core step 300 | CORE 1.0000" in r.stdout


def test_eval_core_on_layouts_and_device(trained):
    d, bundle, _ = trained
    ckpt = d / "ck" / (d / "ck" / "latest").read_text().strip()
    base = [VTRAIN, "eval", "--ckpt", ckpt, "--core", bundle]
    acc, core = core_lines(run(base).stdout)
    assert set(acc.values()) == {1.0} and len(acc) == 5 and core == pytest.approx(1.0)
    for layout in [[], ["--tp", 2], ["--pp", 2]]:
        out = run(["mpirun", "--oversubscribe", "-np", 2, *base, *layout]).stdout
        assert core_lines(out) == (acc, core), layout
        assert "dp %d x tp %d x pp %d" % ((2, 1, 1) if not layout else (1, 2, 1) if layout[0] == "--tp" else (1, 1, 2)) in out
    for dtype in ["f32", "bf16"]:
        assert core_lines(run([*base, "--device", "emulated", "--act-dtype", dtype]).stdout) == (acc, core), dtype


def test_untrained_model_does_not(trained):
    d, bundle, _ = trained
    acc, core = core_lines(run([VTRAIN, "eval", "--ckpt", d / "ck1" / "step_00000001.h5", "--core", bundle]).stdout)
    assert core < 0.5 and max(acc.values()) < 1.0, (acc, core)
