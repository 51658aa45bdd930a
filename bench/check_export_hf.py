# bench/check_export_hf.py owns the transformers check of a `vtrain export` directory: the way
# lm-evaluation-harness's HFLM loads a model (AutoConfig, then AutoModelForCausalLM, both with
# trust_remote_code) must give vtrain's logits (export_check.safetensors), and generate() must run.
"""python bench/check_export_hf.py EXPORT_DIR...: exits non-zero when the transformers model's logits
differ from vtrain's by 1e-4 of the largest logit or more, or generation fails. Where lm_eval
imports, runs its HFLM on the first directory with the export's own tokenizer (check_lm_eval) and
the lm_eval command line on a local three-question task (check_lm_eval_cli)."""
import os
import sys

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoConfig, AutoModelForCausalLM


def check(d: str) -> bool:
    config = AutoConfig.from_pretrained(d, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(d, config=config, trust_remote_code=True,
                                                 dtype=torch.float32).eval()
    check = load_file(os.path.join(d, "export_check.safetensors"))
    ids = torch.from_numpy(check["inputs"]).long()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    got = out.logits[0].double().numpy()
    want = check["logits"]
    err = float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))
    # generate() greedily from an 8-token prompt: its first new token must be the argmax of the
    # logits at the prompt's last position.
    n_prompt = min(8, ids.size(1) - 4)
    gen = model.generate(ids[:, :n_prompt], max_new_tokens=4, do_sample=False)
    first = int(np.argmax(got[n_prompt - 1]))
    ok_gen = gen.shape == (1, n_prompt + 4) and int(gen[0, n_prompt]) == first
    print(f"{os.path.basename(d)}: transformers {model.__class__.__name__} {err:.3e}, "
          f"generate {'ok' if ok_gen else 'FAILED'}")
    return err < 1e-4 and ok_gen


TASK = """task: vtrain_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
QUESTIONS = [
    ("In the beginning God created the", [" heaven and the earth.", " fish of the sea."]),
    ("And God said, Let there be", [" light: and there was light.", " darkness upon the deep."]),
    ("And the evening and the morning were the", [" first day.", " seventh <|bos|> day."]),
]


def check_lm_eval_cli(d: str) -> bool:
    """The `lm_eval` command as docs/usage.md gives it (the export's own tokenizer,
    add_bos_token=True) on a local multiple-choice task (no download): every logged
    loglikelihood must equal the model's own log-softmax summed over the continuation's ids
    (<|bos|> + context + continuation, cut from the left to seq_len + 1 tokens as lm_eval does)."""
    import glob
    import json
    import subprocess
    import tempfile

    from transformers import AutoTokenizer

    w = tempfile.mkdtemp()
    with open(os.path.join(w, "data.jsonl"), "w") as f:
        for q, c in QUESTIONS:
            f.write(json.dumps({"question": q, "choices": c, "answer": 0}) + "\n")
    with open(os.path.join(w, "vtrain_local.yaml"), "w") as f:
        f.write(TASK.format(data=os.path.join(w, "data.jsonl")))
    lm_eval = os.path.join(os.path.dirname(sys.executable), "lm_eval")
    r = subprocess.run([lm_eval, "--model", "hf", "--model_args",
                        f"pretrained={d},trust_remote_code=True,add_bos_token=True,dtype=float32",
                        "--tasks", "vtrain_local", "--include_path", w, "--batch_size", "1",
                        "--device", "cpu", "--log_samples", "--output_path", os.path.join(w, "out")],
                       capture_output=True, text=True, env=dict(os.environ, HF_DATASETS_OFFLINE="1"))
    if r.returncode != 0:
        print(f"lm_eval command FAILED: {r.stderr[-2000:]}")
        return False
    tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, dtype=torch.float32)
    T = model.config.max_position_embeddings
    worst, n = 0.0, 0
    for line in open(glob.glob(os.path.join(w, "out", "*", "samples_vtrain_local_*.jsonl"))[0]):
        s = json.loads(line)
        for a, resp in zip(s["arguments"].values(), s["resps"]):
            ctx, cont = a["arg_0"], a["arg_1"]
            whole = tok(ctx + cont)["input_ids"]
            k0 = len(tok(ctx)["input_ids"])
            inp = whole[-(T + 1):]
            off = len(whole) - len(inp)
            with torch.no_grad():
                lp = torch.log_softmax(model(input_ids=torch.tensor([inp[:-1]])).logits.double(), -1)[0]
            own = sum(float(lp[k - 1 - off, whole[k]]) for k in range(k0, len(whole)))
            worst = max(worst, abs(float(resp[0][0]) - own) / abs(own))
            n += 1
    print(f"lm_eval command ({os.path.basename(d)}, a local task, {n} loglikelihoods): vs the "
          f"model's own log-softmax {worst:.1e} (relative)")
    return n == 2 * len(QUESTIONS) and worst < 1e-5


def check_lm_eval(d: str) -> bool:
    """lm-evaluation-harness's HFLM on the export (trust_remote_code) with the export's own
    tokenizer (tokenizer.json + tokenizer_config.json; bench/check_export_tokenizer.py checks its
    ids against vtrain's) and add_bos_token (vtrain starts every document with <|bos|>): its
    loglikelihood of a continuation must equal the sum of the model's own log-softmax over the ids
    HFLM scores (the tokens of context + continuation after the context's), and generate_until
    must run (batch size 1)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)
    lm = HFLM(pretrained=d, trust_remote_code=True, batch_size=2, device="cpu", dtype="float32",
              add_bos_token=True)
    reqs = [("And God said", " Let there be light"), ("In the beginning", " God created")]
    res = lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=r, idx=i)
                            for i, r in enumerate(reqs)])
    worst = 0.0
    for (ctx, cont), (ll, _) in zip(reqs, res):
        whole = tok(ctx + cont)["input_ids"]  # <|bos|> first
        n = len(tok(ctx)["input_ids"])
        assert whole[0] == tok.bos_token_id and n < len(whole)
        with torch.no_grad():
            lp = torch.log_softmax(lm.model(input_ids=torch.tensor([whole])).logits.double(), -1)[0]
        own = sum(float(lp[k - 1, whole[k]]) for k in range(n, len(whole)))
        worst = max(worst, abs(ll - own) / abs(own))
    lm.batch_size_per_gpu = 1
    gen = lm.generate_until([Instance(request_type="generate_until", doc={}, arguments=(
        "And God said", {"until": ["\n"], "max_gen_toks": 4}), idx=0)])
    import importlib.metadata
    print(f"lm_eval {importlib.metadata.version('lm_eval')} HFLM ({os.path.basename(d)}, the "
          f"export's tokenizer, {type(lm.tokenizer).__name__}): loglikelihood vs the model's own "
          f"log-softmax {worst:.1e} (relative), generate_until "
          f"{'ok' if isinstance(gen[0], str) else 'FAILED'}")
    return worst < 1e-5 and isinstance(gen[0], str)


if __name__ == "__main__":
    import transformers

    dirs = [os.path.abspath(a) for a in sys.argv[1:]]
    ok = True
    for d in dirs:
        try:
            ok = check(d) and ok
        except Exception as e:  # noqa: BLE001
            print(f"{os.path.basename(d)}: transformers FAILED: {type(e).__name__}: {e}")
            ok = False
    print(f"transformers {transformers.__version__}")
    try:
        import lm_eval  # noqa: F401
    except Exception:  # noqa: BLE001
        print("lm_eval does not import: the HFLM check was skipped")
    else:
        ok = check_lm_eval(dirs[0]) and ok
        ok = check_lm_eval_cli(dirs[0]) and ok
    sys.exit(0 if ok else 1)
