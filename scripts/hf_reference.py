#!/usr/bin/env python3
"""Hugging Face transformers as the reference for infer_gpt2 (on the GPU machine: torch and
transformers, no network needed).

  hf_reference.py make --config small|gpt2 --seed S --prompt-len T -n N --out DIR
      A random GPT2LMHeadModel (seeded), saved by save_pretrained (DIR/model.safetensors,
      DIR/config.json: import_hf reads both), a random prompt (DIR/prompt.txt, comma-separated
      ids), HF's greedy continuation of N tokens (DIR/hf_ids.txt) and the fp32 logits each
      token was chosen from, (N, 50257) (DIR/hf_logits.npy). Runs on the CPU in fp32, so the
      reference is exact and deterministic. Greedy = the argmax of HF's logits
      at every step, which is what generate(do_sample=False) chooses; it does not stop at
      <|endoftext|> (infer_gpt2 --no-stop), and generate()'s own output is checked against it.

  hf_reference.py compare --dir DIR --ids OURS_IDS --logits OURS_LOGITS --tol TOL
      Ours (infer_gpt2 --ids --logits, batch 1) against DIR: tokens equal one for one; the logits
      of every step whose inputs are the same on both sides (all steps, or up to the first
      different token) within relative L2 error TOL. A different token passes only as a near tie:
      HF's margin between the two tokens at most twice the largest difference between our logits
      and HF's at that step. Exit status 1 on failure.

  hf_reference.py bench --ttft-prompt 1000 --prompt 128 -n 256 -b 64 -r 5
      generate() speed of GPT-2 124M (random weights, bf16, SDPA attention, dynamic KV cache, the
      defaults) on the GPU, measured as bench/bench_infer.c measures ours; prints "key value".
"""
import argparse
import os
import sys
import time

import numpy as np

CONFIGS = {
    "small": dict(n_layer=2, n_head=2, n_embd=128, n_positions=256),   # head size 64, as flash needs
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024),
}
VOCAB = 50257


def build_model(name, seed):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        **CONFIGS[name])
    return GPT2LMHeadModel(config).eval()


def cmd_make(a):
    import torch

    model = build_model(a.config, a.seed)
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    g = torch.Generator().manual_seed(a.seed + 1)
    prompt = torch.randint(0, VOCAB, (1, a.prompt_len), generator=g)
    seq = prompt
    with torch.no_grad():
        for _ in range(a.n):   # greedy by full recomputation: nothing between us and the logits
            logits = model(seq).logits[0, -1]
            seq = torch.cat([seq, logits.argmax().view(1, 1)], dim=1)
        logits = model(seq[:, :-1]).logits[0, a.prompt_len - 1:].float().numpy()   # (n, V)
        made = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=a.n,
                              do_sample=False, pad_token_id=VOCAB - 1)
    ids = seq[0, a.prompt_len:].tolist()
    by_generate = made[0, a.prompt_len:].tolist()
    if by_generate != ids[:len(by_generate)]:
        sys.exit(f"generate() disagrees with the argmax loop: {by_generate} vs {ids}")
    with open(os.path.join(a.out, "prompt.txt"), "w") as f:
        f.write(",".join(str(t) for t in prompt[0].tolist()) + "\n")
    with open(os.path.join(a.out, "hf_ids.txt"), "w") as f:
        f.write(" ".join(str(t) for t in ids) + "\n")
    np.save(os.path.join(a.out, "hf_logits.npy"), logits)
    print(f"{a.out}: {a.config} model (seed {a.seed}), prompt {a.prompt_len} tokens, "
          f"greedy {a.n} tokens: {ids[:8]}...")


def rel_l2(x, ref):
    return float(np.linalg.norm(x.astype(np.float64) - ref) / np.linalg.norm(ref.astype(np.float64)))


def cmd_compare(a):
    hf_ids = [int(t) for t in open(os.path.join(a.dir, "hf_ids.txt")).read().split()]
    hf_logits = np.load(os.path.join(a.dir, "hf_logits.npy"))
    ours_ids = [int(t) for t in open(a.ids).read().split()]
    ours_logits = np.fromfile(a.logits, dtype=np.float32)
    n = len(hf_ids)
    if len(ours_ids) != n or ours_logits.size != n * VOCAB:
        print(f"FAIL {a.name}: expected {n} tokens and ({n}, {VOCAB}) logits, got {len(ours_ids)} "
              f"tokens and {ours_logits.size} logits")
        return 1
    ours_logits = ours_logits.reshape(n, VOCAB)
    first = next((i for i in range(n) if ours_ids[i] != hf_ids[i]), n)
    same_inputs = min(first + 1, n)   # the step that differs still had the same inputs
    errors = [rel_l2(ours_logits[i], hf_logits[i]) for i in range(same_inputs)]
    worst = max(errors)
    ok = worst <= a.tol
    print(f"{a.name}: {first} of {n} greedy tokens equal to HF's; logits over {same_inputs} steps: "
          f"worst relative L2 error {worst:.2e} (tolerance {a.tol:.0e})")
    if first < n:
        row = hf_logits[first]
        margin = float(row[hf_ids[first]] - row[ours_ids[first]])
        noise = float(np.abs(ours_logits[first].astype(np.float64) - row).max())
        tie = margin <= 2 * noise
        print(f"  step {first}: HF chose {hf_ids[first]}, we chose {ours_ids[first]}; HF's margin "
              f"{margin:.3e}, our logits differ from HF's by up to {noise:.3e}: "
              f"{'a near tie' if tie else 'NOT a tie'}")
        ok = ok and tie
    print(f"{'PASS' if ok else 'FAIL'} {a.name}")
    return 0 if ok else 1


def cmd_bench(a):
    import torch
    import transformers

    model = build_model("gpt2", 0).to("cuda", torch.bfloat16)
    g = torch.Generator().manual_seed(42)
    prompt = torch.randint(0, VOCAB, (1, 1024), generator=g).cuda()

    def generate(T, n, B):
        ids = prompt[:, :T].expand(B, T).contiguous()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, pad_token_id=VOCAB - 1)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def decode_rate(T, n, B):
        generate(T, n, B)   # warm-up
        rates = []
        for _ in range(a.r):
            first = generate(T, 1, B)
            rates.append(B * (n - 1) / (generate(T, n, B) - first))
        return float(np.median(rates))

    generate(a.ttft_prompt, 1, 1)
    ttft = float(np.median([generate(a.ttft_prompt, 1, 1) for _ in range(a.r)]))
    print(f"device {torch.cuda.get_device_name()}")
    print(f"versions torch {torch.__version__} transformers {transformers.__version__}")
    print(f"ttft_ms {ttft * 1e3:.3f}", flush=True)
    print(f"decode_b1_tok_s {decode_rate(a.prompt, a.n, 1):.1f}", flush=True)
    print(f"decode_b1_long_tok_s {decode_rate(a.ttft_prompt, 1024 - a.ttft_prompt, 1):.1f}", flush=True)
    print(f"decode_bB_tok_s {decode_rate(a.prompt, a.n, a.b):.1f}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--config", choices=sorted(CONFIGS), default="small")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--prompt-len", type=int, default=20)
    m.add_argument("-n", type=int, default=32)
    m.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--dir", required=True)
    c.add_argument("--ids", required=True)
    c.add_argument("--logits", required=True)
    c.add_argument("--tol", type=float, default=1e-2)
    c.add_argument("--name", default="parity")
    b = sub.add_parser("bench")
    b.add_argument("--ttft-prompt", type=int, default=1000)
    b.add_argument("--prompt", type=int, default=128)
    b.add_argument("-n", type=int, default=256)
    b.add_argument("-b", type=int, default=64)
    b.add_argument("-r", type=int, default=5)
    a = p.parse_args()
    return {"make": cmd_make, "compare": cmd_compare, "bench": cmd_bench}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
