#!/usr/bin/env python3
"""Writes a Hugging Face folder of a Llama 3, Qwen 2, Qwen 3, Mistral, Phi-3, Gemma 2 or Gemma 3 model with random weights.

For checking stretch's qwen2, qwen3, llama (Mistral) and phi3 families against another engine without downloading a
model: convert it to GGUF with `stretch convert ... --to gguf` and score it with llama.cpp and
stretch (scripts/vs_llamacpp_perplexity.sh; docs/formats.md, "Checked against llama.cpp"). The
tensors are those transformers' modeling_qwen2.py / modeling_qwen3.py hold (q_proj, k_proj and
v_proj, with biases in Qwen 2; o_proj without; Qwen 3's q_norm and k_norm over one head;
input_layernorm, post_attention_layernorm; gate/up/down_proj; embed_tokens, norm, lm_head), in
HF's own layout (q and k rows in rotate-half order: random weights need no permutation), float32,
in one model.safetensors. Deterministic for a given --seed. The norms are near 1, q and k scaled
up so that attention is sharp, the biases --bias times a standard normal (0 gives a model whose
biases are all zero: the control that shows they matter). --head-dim sets heads wider or narrower
than dim / heads (config.json's head_dim, as every Qwen 3 has). Mistral is the LLaMA block
(no biases, no norms on q and k) with --sliding-window W keys per query on every layer (config.json's
sliding_window; 0 writes null, no window). Phi-3 fuses q, k and v into qkv_proj and the gate and up
projections into gate_up_proj (transformers' modeling_phi3.py); --longrope F writes rope_scaling
"longrope" from --seq-len to F times it, with short and long factor lists of its own.

Llama 3 (--family llama; transformers' modeling_llama.py, LlamaForCausalLM): the LLaMA block at
rope_theta 500000, grouped-query as --kv-heads says, with --tie the classifier tied to the
embedding (no lm_head, as Llama 3.2 1B and 3B), and with --llama3 F config.json's rope_scaling
"llama3" (factor F, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings
--seq-len, as Llama 3.1's) and max_position_embeddings F times --seq-len.

Seed-OSS (--family seed_oss; transformers' modeling_seed_oss.py, SeedOssForCausalLM): Qwen 2's
block (q/k/v biases, none on o) with SeedOssConfig's attention_bias true, attention_out_bias and
mlp_bias false.

Only the Python standard library: this runs on a bare Debian machine.

  python3 scripts/random_hf_model.py --out qwen2-random --vocab 512
  python3 scripts/random_hf_model.py --family llama --out llama3-random --dim 512 --heads 8 \
      --kv-heads 2 --vocab 128256 --tie --seq-len 1024 --llama3 8
  python3 scripts/random_hf_model.py --out qwen2-yarn --vocab 512 --yarn 4
  python3 scripts/random_hf_model.py --family qwen3 --out qwen3-random --dim 64 --head-dim 32
  python3 scripts/random_hf_model.py --family mistral --out mistral-random --sliding-window 128
  python3 scripts/random_hf_model.py --family phi3 --out phi3-longrope --seq-len 1024 --longrope 4
  python3 scripts/random_hf_model.py --family gemma3 --out gemma3-random --dim 512 --heads 8 \
      --head-dim 128 --layers 6 --sliding-window 128 --pattern 3
  python3 scripts/random_hf_model.py --family gemma2 --out gemma2-random --dim 512 --heads 8 \
      --head-dim 128 --layers 4 --sliding-window 128

Gemma 3 (transformers' modeling_gemma3.py, Gemma3ForCausalLM): Qwen 3's q_norm and k_norm, the
norms around attention and feed-forward (input_layernorm, post_attention_layernorm,
pre_feedforward_layernorm, post_feedforward_layernorm), every gain stored as w for a model that
multiplies by 1 + w (so drawn near 0), GeGLU, local layers with --sliding-window keys at
rope_local_base_freq 10000 and every --pattern-th layer global at rope_theta 1e6 (with --linear F,
config.json's linear rope_scaling, which transformers applies to the global layers only), tied
embeddings.

Gemma 2 (transformers' modeling_gemma2.py, Gemma2ForCausalLM): Gemma 3's block without q_norm and
k_norm, every layer at rope_theta 10000 (local layers with --sliding-window keys, every --pattern-th
layer global, 2 by default), and its soft caps: attention logits capped at --attn-softcap and the
output's at --final-softcap (x -> cap tanh(x / cap)), tied embeddings.
"""
import argparse
import json
import math
import os
import random
import struct


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="the folder to write (created)")
    p.add_argument("--family", choices=["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3", "seed_oss"], default="qwen2")
    p.add_argument("--llama3", type=float, default=0.0,
                   help="llama: a llama3 factor for config.json's rope_scaling (0: none)")
    p.add_argument("--tie", action="store_true",
                   help="llama: the classifier tied to the embedding (no lm_head)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=172)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=0, help="0: dim / heads")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=256, help="max_position_embeddings (before YaRN)")
    p.add_argument("--bias", type=float, default=0.5,
                   help="the biases' standard deviation (qwen2)")
    p.add_argument("--yarn", type=float, default=0.0,
                   help="a YaRN factor for config.json's rope_scaling (0: none)")
    p.add_argument("--sliding-window", type=int, default=4096,
                   help="mistral: keys per query on every layer (0: null, none)")
    p.add_argument("--longrope", type=float, default=0.0,
                   help="phi3: a LongRoPE factor for config.json's rope_scaling (0: none)")
    p.add_argument("--pattern", type=int, default=0,
                   help="gemma2/3: every P-th layer global (0: the family's, 2 and 6)")
    p.add_argument("--attn-softcap", type=float, default=50.0,
                   help="gemma2: attn_logit_softcapping (0: null, none)")
    p.add_argument("--final-softcap", type=float, default=30.0,
                   help="gemma2: final_logit_softcapping (0: null, none)")
    p.add_argument("--linear", type=float, default=0.0,
                   help="gemma3: a linear rope_scaling factor for the global layers (0: none)")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    C, F, L, H, G, V, T = a.dim, a.hidden, a.layers, a.heads, a.kv_heads, a.vocab, a.seq_len
    D = a.head_dim or C // H
    if (not a.head_dim and C % H) or H % G or D % 2:
        p.error("heads must be of even width (dim / heads, or --head-dim), and kv-heads divide heads")
    qwen3 = a.family == "qwen3"
    mistral = a.family == "mistral"
    phi3 = a.family == "phi3"
    gemma3 = a.family == "gemma3"
    gemma = a.family in ("gemma2", "gemma3")  # Gemma's block
    pattern = a.pattern or (2 if a.family == "gemma2" else 6)
    biases = a.family in ("qwen2", "seed_oss")
    rng = random.Random(a.seed)
    tensors = {}

    def tensor(name, shape, scale, mean=0.0):
        n = math.prod(shape)
        tensors[name] = (shape, [mean + scale * rng.gauss(0, 1) for _ in range(n)])

    sc = 1 / math.sqrt(C)
    # Gemma multiplies the embedding by sqrt(dim) and ties it to the classifier: rows of norm
    # about 1 keep both the stream and the logits about unit-variance.
    # A tied Llama's too (--tie): with rows of norm sqrt(dim) the logits would be hundreds of nats.
    tied = gemma or (a.family == "llama" and a.tie)
    tensor("model.embed_tokens.weight", [V, C], sc if tied else 1.0)
    for layer in range(L):
        pre = f"model.layers.{layer}."
        tensor(pre + "input_layernorm.weight", [C], 0.1, 1.0)
        tensor(pre + "self_attn.q_proj.weight", [H * D, C], 2 * sc)
        if biases:
            tensor(pre + "self_attn.q_proj.bias", [H * D], a.bias)
        tensor(pre + "self_attn.k_proj.weight", [G * D, C], 2 * sc)
        if biases:
            tensor(pre + "self_attn.k_proj.bias", [G * D], a.bias)
        tensor(pre + "self_attn.v_proj.weight", [G * D, C], sc)
        if biases:
            tensor(pre + "self_attn.v_proj.bias", [G * D], a.bias)
        if qwen3:  # unit-RMS heads after the norm: gains near 2 keep attention sharp
            tensor(pre + "self_attn.q_norm.weight", [D], 0.3, 2.0)
            tensor(pre + "self_attn.k_norm.weight", [D], 0.3, 2.0)
        if gemma3:  # gains stored as w for 1 + w: near 1 for q and k (sharp), near 0 elsewhere
            tensor(pre + "self_attn.q_norm.weight", [D], 0.3, 1.0)
            tensor(pre + "self_attn.k_norm.weight", [D], 0.3, 1.0)
        tensor(pre + "self_attn.o_proj.weight", [C, H * D], 1 / math.sqrt(H * D))
        tensor(pre + "post_attention_layernorm.weight", [C], 0.1, 1.0)
        tensor(pre + "mlp.gate_proj.weight", [F, C], sc)
        tensor(pre + "mlp.up_proj.weight", [F, C], sc)
        tensor(pre + "mlp.down_proj.weight", [C, F], 1 / math.sqrt(F))
        if gemma:
            tensor(pre + "pre_feedforward_layernorm.weight", [C], 0.1)
            tensor(pre + "post_feedforward_layernorm.weight", [C], 0.1)
            for norm in ("input_layernorm", "post_attention_layernorm"):
                tensor(pre + norm + ".weight", [C], 0.1)
    tensor("model.norm.weight", [C], 0.1, 0.0 if gemma else 1.0)
    if not tied:  # Gemma ties its classifier to the embedding, and a Llama with --tie
        tensor("lm_head.weight", [V, C], sc)

    if phi3:  # Phi3Attention.qkv_proj: q, k, v by rows; Phi3MLP.gate_up_proj: gate, then up
        for layer in range(L):
            pre = f"model.layers.{layer}."
            parts = [tensors.pop(pre + f"self_attn.{x}_proj.weight") for x in "qkv"]
            tensors[pre + "self_attn.qkv_proj.weight"] = (
                [sum(s[0] for s, _ in parts), C], [v for _, vs in parts for v in vs])
            parts = [tensors.pop(pre + f"mlp.{x}_proj.weight") for x in ("gate", "up")]
            tensors[pre + "mlp.gate_up_proj.weight"] = ([2 * F, C], [v for _, vs in parts for v in vs])

    # safetensors: an 8-byte little-endian header length, the JSON header (padded with spaces to
    # a multiple of 8), then the tensors' bytes in the header's order.
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, (shape, values) in tensors.items():
        b = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    config = {
        "architectures": ["Qwen3ForCausalLM" if qwen3 else "Qwen2ForCausalLM"],
        "model_type": a.family, "hidden_size": C, "head_dim": D,
        "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": G, "vocab_size": V,
        "max_position_embeddings": int(T * a.yarn) if a.yarn else T, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": L,
        "rope_scaling": ({"type": "yarn", "factor": a.yarn, "original_max_position_embeddings": T}
                         if a.yarn else None),
        "torch_dtype": "float32",
    }
    if qwen3:
        config["attention_bias"] = False
    if phi3:
        config["architectures"] = ["Phi3ForCausalLM"]
        for key in ("use_sliding_window", "max_window_layers"):
            del config[key]
        config["sliding_window"] = None
        config["rope_theta"] = 10000.0
        config["original_max_position_embeddings"] = T
        if a.longrope:
            pairs = D // 2
            config["max_position_embeddings"] = int(T * a.longrope)
            config["rope_scaling"] = {
                "type": "longrope",
                "short_factor": [round(1.0 + 0.5 * t / pairs, 4) for t in range(pairs)],
                "long_factor": [round(1.0 + (a.longrope * 2 - 1) * (t / pairs) ** 2, 4)
                                for t in range(pairs)],
            }
    if gemma:
        for key in ("use_sliding_window", "max_window_layers", "hidden_act"):
            del config[key]
        config.update({
            "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
            "query_pre_attn_scalar": D, "sliding_window": a.sliding_window,
            "layer_types": ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                            for i in range(L)],
            "attention_bias": False,
        })
    if gemma3:
        config.update({
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "rope_local_base_freq": 10000.0, "final_logit_softcapping": None,
            "attn_logit_softcapping": None,
            "rope_scaling": {"rope_type": "linear", "factor": a.linear} if a.linear else None,
        })
    if a.family == "gemma2":
        config.update({
            "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "rope_theta": 10000.0,
            "attn_logit_softcapping": a.attn_softcap or None,
            "final_logit_softcapping": a.final_softcap or None, "rope_scaling": None,
        })
    if mistral:
        config["architectures"] = ["MistralForCausalLM"]
        for key in ("use_sliding_window", "max_window_layers"):
            del config[key]
        config["sliding_window"] = a.sliding_window or None
        config["rope_theta"] = 10000.0
    if a.family == "seed_oss":  # Qwen 2's block; SeedOssConfig's bias switches
        for key in ("use_sliding_window", "sliding_window", "max_window_layers"):
            del config[key]
        config.update({"architectures": ["SeedOssForCausalLM"], "attention_bias": True,
                       "attention_out_bias": False, "mlp_bias": False})
    if a.family == "llama":
        for key in ("use_sliding_window", "sliding_window", "max_window_layers"):
            del config[key]
        config.update({
            "architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0,
            "tie_word_embeddings": a.tie, "attention_bias": False, "mlp_bias": False,
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": int(T * a.llama3) if a.llama3 else T,
            "rope_scaling": ({"rope_type": "llama3", "factor": a.llama3, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": T}
                             if a.llama3 else None),
        })
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()
