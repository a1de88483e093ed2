#!/usr/bin/python3
"""PyTorch reference (CPU or CUDA; fp32 or bf16) for the engine's training-step throughput.

A GPT-2-shaped model with exactly the architecture the engine trains:
  token + learned position embeddings;
  per block (pre-LN): x += proj(attn(ln1(x)))   attn: qkv Linear (bias), causal softmax
                                                 attention, scale 1/sqrt(head_dim)
                      x += proj(gelu_tanh(fc(ln2(x))))   fc, proj: Linear (bias)
  final LayerNorm; untied output head without bias; mean cross-entropy; AdamW (lr 3e-4,
  weight decay 0 as the engine's AdamWConfig default).
One step = zero_grad, forward, loss, backward, optimizer step. Random tokens, fixed seed.

Prints one JSON line:
  {"framework": "pytorch", "tokens_per_s": ..., "step_ms": ..., "model_flops_per_s": ..., ...}

--device cuda trains on GPU 0 (the engine's `train --backend cuda`); the JSON adds "gpu" (the
device's name) and "peak_memory_bytes" (torch.cuda.max_memory_allocated over the run). Steps are
timed between torch.cuda.synchronize() calls. --dtype fp32 computes in IEEE fp32 (TF32 off, as
the engine's fp32 cuBLASLt GEMMs); --dtype bf16 (CUDA only) runs forward and loss under
torch.autocast(device_type="cuda", dtype=torch.bfloat16) with fp32 master weights and optimizer
state, as the engine's bf16 mode (bf16 GEMM inputs, fp32 accumulation). Exit status 2 when no
CUDA device is usable, 3 when the batch does not fit in device memory (one line on stderr).

Model FLOPs (the same formula as the engine's benchmarks), per trained token, forward +
backward, with L layers, hidden C, sequence T, vocabulary V:
  flops_per_token = 6 * N + 12 * L * T * C,   N = 12 * L * C^2 + V * C
N counts the weights of the matrix products (qkv 3C^2, attention proj C^2, fc 4C^2, fc proj
4C^2 per layer, and the V x C head); biases, LayerNorms and the embedding lookups are left out.
12 * L * T * C is the attention score and value products (2 * 2 * T * C per token and layer
forward, times 3 for forward + backward), counted without the causal halving (PaLM convention).
model_flops_per_s = flops_per_token * batch * seq / step time.

Run with Debian's python3-torch: /usr/bin/python3 tests/bench/torch_gpt_step.py --threads 2
(scripts/setup --bench installs it). On a GPU machine:
  python3 tests/bench/torch_gpt_step.py --device cuda --dtype bf16 --seq 1024 --batch 16
"""

import argparse
import json
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="intra-op threads (PyTorch and OpenBLAS)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to train (cuda: GPU 0)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32, or bf16 autocast of forward and loss with fp32 master weights "
                        "(cuda only)")
    a = p.parse_args()
    if a.dtype == "bf16" and a.device != "cuda":
        p.error("--dtype bf16 is for --device cuda (the CPU reference is fp32)")
    if a.hidden % a.heads != 0:
        p.error(f"heads={a.heads} does not divide hidden={a.hidden}")
    if min(a.layers, a.hidden, a.heads, a.seq, a.batch, a.vocab, a.steps, a.threads) < 1:
        p.error("sizes, steps and threads must be >= 1")
    if a.warmup < 0:
        p.error("warmup must be >= 0")
    return a


def flops_per_token(layers, hidden, seq, vocab):
    n = 12 * layers * hidden * hidden + vocab * hidden
    return 6 * n + 12 * layers * seq * hidden


def ieee_fp32(torch):
    """fp32 matrix products and convolutions without TF32 (the engine's fp32 GEMMs use none)."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # PyTorch >= 2.9: the legacy flags are deprecated
        if hasattr(torch.backends, "fp32_precision"):
            torch.backends.fp32_precision = "ieee"
        matmul.fp32_precision = "ieee"
        conv = getattr(torch.backends.cudnn, "conv", None)
        if conv is not None and hasattr(conv, "fp32_precision"):
            conv.fp32_precision = "ieee"
    else:
        matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def main():
    args = parse_args()
    # The BLAS and OpenMP pools read these when torch loads: set them before the import.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        sys.exit("torch_gpt_step: PyTorch not found (Debian: apt-get install python3-torch, "
                 "or scripts/setup --bench; run with /usr/bin/python3)")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            print("torch_gpt_step: no usable CUDA device (torch " + torch.__version__ +
                  ", built for CUDA " + str(torch.version.cuda) + ")", file=sys.stderr)
            sys.exit(2)
        ieee_fp32(torch)
    device = torch.device("cuda:0" if cuda else "cpu")
    out_of_memory = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    sdpa = getattr(F, "scaled_dot_product_attention", None)  # PyTorch >= 2.0

    class Attention(nn.Module):
        def __init__(self, c, nh, t):
            super().__init__()
            self.nh = nh
            self.qkv = nn.Linear(c, 3 * c)
            self.proj = nn.Linear(c, c)
            self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1),
                                 persistent=False)

        def forward(self, x):  # (B, T, C)
            b, t, c = x.shape
            hs = c // self.nh
            q, k, v = self.qkv(x).split(c, dim=2)
            q = q.view(b, t, self.nh, hs).transpose(1, 2)  # (B, NH, T, HS)
            k = k.view(b, t, self.nh, hs).transpose(1, 2)
            v = v.view(b, t, self.nh, hs).transpose(1, 2)
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, NH, T, T)
                att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
                y = att @ v  # (B, NH, T, HS)
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self, c, nh, t):
            super().__init__()
            self.ln1 = nn.LayerNorm(c)
            self.attn = Attention(c, nh, t)
            self.ln2 = nn.LayerNorm(c)
            self.fc = nn.Linear(c, 4 * c)
            self.gelu = nn.GELU(approximate="tanh")
            self.fc_proj = nn.Linear(4 * c, c)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc_proj(self.gelu(self.fc(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.hidden)
            self.wpe = nn.Embedding(a.seq, a.hidden)
            self.blocks = nn.ModuleList(Block(a.hidden, a.heads, a.seq) for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.hidden)
            self.head = nn.Linear(a.hidden, a.vocab, bias=False)  # untied

        def forward(self, idx):  # (B, T) -> logits (B, T, V)
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))

    model = Gpt(args).to(device)  # fp32 parameters (the master weights under bf16 autocast)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
    idx, targets = tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)

    def forward_loss():
        logits = model(idx)
        return F.cross_entropy(logits.reshape(-1, args.vocab).float(), targets.view(-1))

    def step():
        opt.zero_grad(set_to_none=True)
        if args.dtype == "bf16":
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = forward_loss()
        else:
            loss = forward_loss()
        loss.backward()
        opt.step()
        return loss.item()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = []
    loss = float("nan")
    try:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for _ in range(args.warmup):
            step()
        for _ in range(args.steps):
            sync()
            t0 = time.perf_counter()
            loss = step()
            sync()
            times.append(time.perf_counter() - t0)
    except out_of_memory as e:
        if cuda and (out_of_memory is not RuntimeError or "out of memory" in str(e)):
            print(f"torch_gpt_step: batch {args.batch} x seq {args.seq} ({args.dtype}) does not "
                  "fit in device memory (CUDA out of memory)", file=sys.stderr)
            sys.exit(3)
        raise
    step_s = sum(times) / len(times)
    tokens_per_step = args.batch * args.seq
    extra = {}
    if cuda:
        extra = {"gpu": torch.cuda.get_device_name(0),
                 "peak_memory_bytes": torch.cuda.max_memory_allocated(),
                 "cuda": torch.version.cuda}
    print(json.dumps({
        "framework": "pytorch",
        "tokens_per_s": round(tokens_per_step / step_s, 2),
        "step_ms": round(step_s * 1e3, 2),
        "model_flops_per_s": round(flops_per_token(args.layers, args.hidden, args.seq,
                                                   args.vocab) * tokens_per_step / step_s),
        "min_step_ms": round(min(times) * 1e3, 2),
        "threads": args.threads,
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq": args.seq,
        "batch": args.batch, "vocab": args.vocab, "steps": args.steps,
        "attention": "sdpa" if sdpa is not None else "masked-matmul",
        "torch": torch.__version__,
        "loss": round(loss, 4),
        "device": args.device,
        "dtype": args.dtype,
        **extra,
    }))


if __name__ == "__main__":
    main()
