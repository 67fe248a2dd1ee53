#!/usr/bin/env python3
"""Writes a llama2.c checkpoint (the legacy, version-0 layout) with random weights.

For speed comparisons at real model shapes without downloading a model: the weights are uniform in
+-0.02 * sqrt(3) (standard deviation 0.02, as GPT-2 style initializations use), the RMSNorm gains
are 1, and the file is deterministic for a given --seed. The classifier is tied to the token
embedding (positive vocab_size in the header).

Layout (Karpathy's llama2.c, run.c: read_checkpoint / memory_map_weights): seven int32 header
fields (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then float32 arrays:
token embedding (vocab x dim); per layer, stacked over layers: attention RMS gains (dim), wq
(dim x dim), wk (dim x kv_dim), wv (dim x kv_dim), wo (dim x dim), FFN RMS gains (dim), w1 (hidden
x dim), w2 (dim x hidden), w3 (hidden x dim); final RMS gains (dim); the RoPE tables freq_cis_real
and freq_cis_imag (seq_len x head_size / 2 each, unused by readers that compute RoPE).

Only the Python standard library: this runs on a bare Debian machine.

  python3 scripts/random_llama2c.py --dim 288 --hidden 768 --layers 6 --heads 6 --vocab 512 \
      --seq-len 256 --out s15m.bin
"""

import argparse
import array
import math
import random
import struct
import sys


def uniform_block(rng, n, scale):
    """n floats uniform in [-scale, scale), from 16 random bits each."""
    raw = array.array("h")
    raw.frombytes(rng.randbytes(2 * n))
    step = scale / 32768.0
    return array.array("f", (v * step for v in raw))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, required=True, help="model width")
    p.add_argument("--hidden", type=int, required=True, help="FFN hidden width")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=0, help="default: --heads")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True, help="the trained length in the header")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    kv_heads = a.kv_heads or a.heads
    for name in ("dim", "hidden", "layers", "heads", "vocab", "seq_len"):
        if getattr(a, name) < 1:
            sys.exit(f"random_llama2c: --{name.replace('_', '-')} must be >= 1")
    if a.dim % a.heads or a.heads % kv_heads:
        sys.exit(f"random_llama2c: --dim {a.dim} must split into --heads {a.heads}, and those into "
                 f"--kv-heads {kv_heads}")
    head = a.dim // a.heads
    if head % 2:
        sys.exit(f"random_llama2c: the head size {head} must be even (RoPE pairs)")
    kv_dim = head * kv_heads
    rng = random.Random(a.seed)
    scale = 0.02 * math.sqrt(3.0)
    L, D, H = a.layers, a.dim, a.hidden
    with open(a.out, "wb") as f:
        f.write(struct.pack("7i", D, H, L, a.heads, kv_heads, a.vocab, a.seq_len))
        ones = array.array("f", [1.0]) * D

        def rand(n):
            uniform_block(rng, n, scale).tofile(f)

        rand(a.vocab * D)
        for _ in range(L):
            ones.tofile(f)
        rand(L * D * D)  # wq
        rand(L * D * kv_dim)  # wk
        rand(L * D * kv_dim)  # wv
        rand(L * D * D)  # wo
        for _ in range(L):
            ones.tofile(f)
        rand(L * H * D)  # w1
        rand(L * D * H)  # w2
        rand(L * H * D)  # w3
        ones.tofile(f)
        real = array.array("f")
        imag = array.array("f")
        for pos in range(a.seq_len):
            for i in range(head // 2):
                angle = pos * 10000.0 ** (-2.0 * i / head)
                real.append(math.cos(angle))
                imag.append(math.sin(angle))
        real.tofile(f)
        imag.tofile(f)


if __name__ == "__main__":
    main()
