#!/usr/bin/env python3
"""Writes a random-weight LLaMA-family GGUF file of any shape, tensor by tensor.

For speed and memory comparisons at real model shapes (an 8B model's 16 GB in BF16 included)
without downloading a model or holding it in memory: each tensor is generated and written in
slices of at most 64 MiB, so the script's own memory stays small whatever the shape.

The vocabulary is copied from another GGUF file (--vocab-from): every `tokenizer.*` key, and the
vocabulary size is the number of its tokens. `stretch convert -m tiny.bin -t tokenizer.json --to
gguf --out vocab.gguf` writes one (scripts/vs_llamacpp.sh does, for Llama 3's vocabulary).

Weights: matrices in --type (f32, f16 or bf16), every entry of random sign and a magnitude drawn
from [2^-8, 2^-6) (about 0.004-0.016, standard deviation about 0.009), built from random bytes
with bytes.translate so that no Python loop runs per weight; RMSNorm gains 1 in F32 (llama.cpp's
own converter keeps norms in F32). Deterministic for a given --seed. Quantized types come from
llama.cpp's llama-quantize on the BF16 or F32 file, as real files do.

Layout (llama.cpp's gguf format, version 3; its `llama` architecture's keys and tensor names):
token_embd, then per block attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate,
ffn_down, ffn_up, then output_norm and, unless --tied, output.

Only the Python standard library: this runs on a bare Debian machine.

  python3 scripts/random_gguf.py --dim 2048 --hidden 8192 --layers 16 --heads 32 --kv-heads 8 \\
      --rope-base 500000 --tied --type bf16 --vocab-from vocab.gguf --out llama-1b-bf16.gguf
"""

import argparse
import os
import random
import struct
import sys

GGUF_MAGIC = b"GGUF"
ALIGNMENT = 32
# gguf value types (ggml/include/gguf.h)
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
SCALAR = {T_UINT8: "B", T_INT8: "b", T_UINT16: "H", T_INT16: "h", T_UINT32: "I", T_INT32: "i",
          T_FLOAT32: "f", T_BOOL: "?", T_UINT64: "Q", T_INT64: "q", T_FLOAT64: "d"}
# ggml tensor types (ggml/include/ggml.h) and llama_ftype (include/llama.h) of an all-TYPE file
TYPES = {"f32": (0, 4, 0), "f16": (1, 2, 1), "bf16": (30, 2, 32)}  # ggml type, bytes, file type
SLICE = 1 << 24  # weights per slice written


class Reader:
    def __init__(self, path):
        self.f = open(path, "rb")
        self.path = path

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        data = self.f.read(size)
        if len(data) != size:
            sys.exit(f"random_gguf: {self.path}: ends inside its metadata (not a whole GGUF file)")
        return struct.unpack("<" + fmt, data)[0]

    def string(self):
        n = self.take("Q")
        data = self.f.read(n)
        if len(data) != n:
            sys.exit(f"random_gguf: {self.path}: ends inside a string of its metadata")
        return data

    def value(self, t):
        """One value of type t, returned as its raw bytes (written back unchanged)."""
        if t in SCALAR:
            return struct.pack("<" + SCALAR[t], self.take(SCALAR[t]))
        if t == T_STRING:
            s = self.string()
            return struct.pack("<Q", len(s)) + s
        if t == T_ARRAY:
            et, n = self.take("I"), self.take("Q")
            if et in SCALAR:
                size = struct.calcsize(SCALAR[et]) * n
                data = self.f.read(size)
                if len(data) != size:
                    sys.exit(f"random_gguf: {self.path}: ends inside an array of its metadata")
                return struct.pack("<IQ", et, n) + data
            return struct.pack("<IQ", et, n) + b"".join(self.value(et) for _ in range(n))
        sys.exit(f"random_gguf: {self.path}: metadata value type {t} is not one GGUF version 3 has")


def read_tokenizer_keys(path):
    """Every tokenizer.* key of a GGUF file as (name, type, raw value bytes), and its token count."""
    r = Reader(path)
    if r.f.read(4) != GGUF_MAGIC:
        sys.exit(f"random_gguf: --vocab-from {path}: not a GGUF file (no GGUF magic)")
    version = r.take("I")
    if version not in (2, 3):
        sys.exit(f"random_gguf: --vocab-from {path}: GGUF version {version}, expected 2 or 3")
    r.take("Q")  # tensors
    n_kv = r.take("Q")
    keys, n_tokens = [], None
    for _ in range(n_kv):
        name = r.string().decode("utf-8")
        t = r.take("I")
        raw = r.value(t)
        if name.startswith("tokenizer."):
            keys.append((name, t, raw))
            if name == "tokenizer.ggml.tokens":
                n_tokens = struct.unpack_from("<Q", raw, 4)[0]
    if n_tokens is None:
        sys.exit(f"random_gguf: --vocab-from {path}: no tokenizer.ggml.tokens key, so no vocabulary")
    return keys, n_tokens


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(name, t, raw):
    return gguf_string(name) + struct.pack("<I", t) + raw


def random_bytes(rng, n_weights, type_name):
    """n_weights random weights in the type's little-endian bytes (see the module's docstring)."""
    if type_name == "bf16":
        # high byte: sign and the exponent's top 7 bits (60: exponents 120-121); low byte: the
        # exponent's last bit and 7 mantissa bits, at random
        high = bytes((b & 0x80) | 60 for b in range(256))
        out = bytearray(2 * n_weights)
        out[0::2] = rng.randbytes(n_weights)
        out[1::2] = rng.randbytes(n_weights).translate(high)
        return out
    if type_name == "f16":
        # sign, exponent 8 (2^-7), mantissa's top 2 bits at random; then 8 mantissa bits
        high = bytes((b & 0x80) | (8 << 2) | (b & 3) for b in range(256))
        out = bytearray(2 * n_weights)
        out[0::2] = rng.randbytes(n_weights)
        out[1::2] = rng.randbytes(n_weights).translate(high)
        return out
    out = bytearray(4 * n_weights)  # f32: the bf16 pattern in the top half, random below
    high = bytes((b & 0x80) | 60 for b in range(256))
    out[0::4] = rng.randbytes(n_weights)
    out[1::4] = rng.randbytes(n_weights)
    out[2::4] = rng.randbytes(n_weights)
    out[3::4] = rng.randbytes(n_weights).translate(high)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, required=True, help="model width")
    p.add_argument("--hidden", type=int, required=True, help="feed-forward hidden width")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=0, help="default: --heads")
    p.add_argument("--ctx", type=int, default=8192, help="llama.context_length (default 8192)")
    p.add_argument("--rope-base", type=float, default=10000.0)
    p.add_argument("--tied", action="store_true",
                   help="no output.weight: the classifier is the embedding (Llama 3.2 1B / 3B)")
    p.add_argument("--type", choices=sorted(TYPES), default="bf16",
                   help="the matrices' type (default bf16); norms stay f32")
    p.add_argument("--vocab-from", required=True,
                   help="a GGUF file whose tokenizer.* keys (and so vocabulary size) are copied")
    p.add_argument("--name", default="", help="general.name (default: the output's file name)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    kv_heads = a.kv_heads or a.heads
    for name in ("dim", "hidden", "layers", "heads", "ctx"):
        if getattr(a, name) < 1:
            sys.exit(f"random_gguf: --{name} must be >= 1")
    if a.dim % a.heads or a.heads % kv_heads or (a.dim // a.heads) % 2:
        sys.exit(f"random_gguf: --dim {a.dim} must split into --heads {a.heads} of an even size, "
                 f"and those into --kv-heads {kv_heads}")
    tok_keys, vocab = read_tokenizer_keys(a.vocab_from)
    head = a.dim // a.heads
    kv_dim = head * kv_heads
    gtype, width, ftype = TYPES[a.type]
    D, F, V = a.dim, a.hidden, vocab

    # (name, ne (ggml order: the row length first), type, bytes per element)
    tensors = [("token_embd.weight", (D, V), gtype, width)]
    for i in range(a.layers):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (D,), 0, 4),
                    (b + "attn_q.weight", (D, D), gtype, width),
                    (b + "attn_k.weight", (D, kv_dim), gtype, width),
                    (b + "attn_v.weight", (D, kv_dim), gtype, width),
                    (b + "attn_output.weight", (D, D), gtype, width),
                    (b + "ffn_norm.weight", (D,), 0, 4),
                    (b + "ffn_gate.weight", (D, F), gtype, width),
                    (b + "ffn_down.weight", (F, D), gtype, width),
                    (b + "ffn_up.weight", (D, F), gtype, width)]
    tensors.append(("output_norm.weight", (D,), 0, 4))
    if not a.tied:
        tensors.append(("output.weight", (D, V), gtype, width))

    name = a.name or os.path.splitext(os.path.basename(a.out))[0]
    meta = [
        kv("general.architecture", T_STRING, gguf_string("llama")),
        kv("general.name", T_STRING, gguf_string(name)),
        kv("general.file_type", T_UINT32, struct.pack("<I", ftype)),
        kv("llama.context_length", T_UINT32, struct.pack("<I", a.ctx)),
        kv("llama.embedding_length", T_UINT32, struct.pack("<I", D)),
        kv("llama.block_count", T_UINT32, struct.pack("<I", a.layers)),
        kv("llama.feed_forward_length", T_UINT32, struct.pack("<I", F)),
        kv("llama.rope.dimension_count", T_UINT32, struct.pack("<I", head)),
        kv("llama.attention.head_count", T_UINT32, struct.pack("<I", a.heads)),
        kv("llama.attention.head_count_kv", T_UINT32, struct.pack("<I", kv_heads)),
        kv("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, struct.pack("<f", 1e-5)),
        kv("llama.rope.freq_base", T_FLOAT32, struct.pack("<f", a.rope_base)),
        kv("llama.vocab_size", T_UINT32, struct.pack("<I", V)),
    ] + [kv(n, t, raw) for n, t, raw in tok_keys]

    header = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(meta)))
    for m in meta:
        header += m
    offset = 0
    for tname, ne, t, w in tensors:
        header += gguf_string(tname) + struct.pack("<I", len(ne))
        for n in ne:
            header += struct.pack("<Q", n)
        header += struct.pack("<IQ", t, offset)
        count = 1
        for n in ne:
            count *= n
        offset += -(-count * w // ALIGNMENT) * ALIGNMENT
    header += bytes(-len(header) % ALIGNMENT)

    rng = random.Random(a.seed)
    one = struct.pack("<f", 1.0)
    tmp = a.out + ".partial"
    total = len(header) + offset
    written = 0
    with open(tmp, "wb") as f:
        f.write(header)
        for tname, ne, t, w in tensors:
            count = 1
            for n in ne:
                count *= n
            if t == 0 and len(ne) == 1:
                f.write(one * count)
            else:
                left = count
                while left > 0:
                    n = min(left, SLICE)
                    f.write(random_bytes(rng, n, a.type))
                    left -= n
                    written += n * w
                    if sys.stderr.isatty():
                        print(f"\rrandom_gguf: {written / 1e9:.1f} of {total / 1e9:.1f} GB",
                              end="", file=sys.stderr)
            f.write(bytes(-count * w % ALIGNMENT))
    os.replace(tmp, a.out)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"random_gguf: {a.out}: {len(tensors)} tensors, {total / 1e9:.2f} GB, vocabulary {V}, "
          f"{a.type} matrices")


if __name__ == "__main__":
    main()
