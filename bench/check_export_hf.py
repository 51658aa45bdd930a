# bench/check_export_hf.py owns the transformers check of a `vtrain export` directory: the way
# lm-evaluation-harness's HFLM loads a model (AutoConfig, then AutoModelForCausalLM, both with
# trust_remote_code) must give vtrain's logits (export_check.safetensors), and generate() must run.
"""python bench/check_export_hf.py EXPORT_DIR...: exits non-zero when the transformers model's logits
differ from vtrain's by 1e-4 of the largest logit or more, or generation fails. Also reports
whether tokenizer.json loads in `tokenizers` (vtrain writes its own tokenizer format)."""
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


def tokenizer_loads(d: str) -> str:
    try:
        from tokenizers import Tokenizer
        Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        return "loads in tokenizers"
    except Exception as e:  # noqa: BLE001
        return f"does not load in tokenizers ({type(e).__name__}: {str(e)[:80]})"


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
    print(f"transformers {transformers.__version__}; {os.path.basename(dirs[0])}/tokenizer.json "
          f"{tokenizer_loads(dirs[0])}")
    sys.exit(0 if ok else 1)
