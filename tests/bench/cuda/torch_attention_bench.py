#!/usr/bin/env python3
"""Causal attention at GPT-2 124M's shape through PyTorch's fused kernels, one line per backend.

The reference for pipetune's own attention kernels (tests/bench/cuda/cuda_attention_bench.cpp,
same shape and FLOP count): which fused attention a GPU machine has (cuDNN's, FlashAttention-2's,
the memory-efficient one) and how fast each runs there, so that choosing cuDNN's fused attention
for the CUDA backend is decided on a measurement, not on a datasheet.

  python3 tests/bench/cuda/torch_attention_bench.py [--batches "8 64"] [--seq 1024] [--reps 50]

Shape: (B, 12 heads, T, 64), bf16, causal. TFLOP/s counts the causal half's products once, as the
C++ bench does: forward 2 B NH T^2 HS, backward twice that. Timed with CUDA events around each
repetition (median), inputs drawn at random (never zeros), after warm-up. The backward time is the
forward-and-backward time less the forward's median. A backend that refuses the shape says so.
Exit status: 0, 2 without a GPU or on a usage error.
"""
import argparse
import statistics
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="8 64")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batches.split()]
    except ValueError:
        print(f"torch_attention_bench: --batches must be whole numbers, not '{args.batches}'",
              file=sys.stderr)
        return 2
    if not batches or min(batches) < 1 or args.seq < 1 or args.reps < 3:
        print("torch_attention_bench: batches and --seq must be positive, --reps at least 3",
              file=sys.stderr)
        return 2

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("torch_attention_bench: no usable GPU", file=sys.stderr)
        return 2
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print(f"torch_attention_bench: torch {torch.__version__} has no torch.nn.attention "
              "(2.3 or newer needed)", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION),
                ("mem-efficient", SDPBackend.EFFICIENT_ATTENTION)]
    T, NH, HS = args.seq, args.heads, args.head_size

    def timed(fn):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(args.reps):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            ms.append(start.elapsed_time(stop))
        return statistics.median(ms)

    print(f"{'backend':<14} {'B':>3} {'fwd ms':>8} {'TFLOP/s':>8} {'bwd ms':>8} {'TFLOP/s':>8} "
          f"{'max |err| vs fp32':>18}")
    for B in batches:
        forward_flops = 2.0 * B * NH * T * T * HS
        torch.manual_seed(B)
        q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                       is_causal=True)
        for name, backend in backends:
            try:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    err = (out.float() - reference).abs().max().item()

                    def forward():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, is_causal=True)

                    def forward_backward():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        torch.autograd.grad(o, (q, k, v), dout)

                    f_ms = timed(forward)
                    fb_ms = timed(forward_backward)
            except RuntimeError as error:  # the backend refuses this shape or machine
                print(f"{name:<14} {B:>3} refused: {str(error).splitlines()[0][:100]}")
                continue
            b_ms = max(fb_ms - f_ms, 1e-9)
            print(f"{name:<14} {B:>3} {f_ms:>8.3f} {forward_flops / f_ms * 1e-9:>8.1f} "
                  f"{b_ms:>8.3f} {2 * forward_flops / b_ms * 1e-9:>8.1f} {err:>18.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
