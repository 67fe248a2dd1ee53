// stretch inspect: a model's configuration, size, and the memory it needs at a context length;
// and what a position method does at that length (the rotation view of src/eval/rotation.h).
#include <fmt/format.h>

#include <memory>

#include <algorithm>
#include <cmath>

#include "src/core/error.h"
#include "src/core/threads.h"
#include "src/eval/rotation.h"
#include "src/eval/score.h"
#include "src/io/llama2c.h"
#include "src/model/transformer.h"
#include "src/position/plan.h"
#include "tools/cli/common.h"

namespace stretch::cli {
namespace {

struct InspectArgs {
  std::string model;
  int64_t ctx = 0;
  MethodArgs method;
  CacheTypeArgs cache_type;
  std::string weights;  // --weights: how a GGUF file's matrices would be held
};

void Row(const std::string& label, const std::string& value) {
  fmt::print("  {:<44} {}\n", label, value);
}

void PrintMethod(const SweepMethod& method, const RopeGeometry& geo, const AttentionPlan& plan) {
  const int64_t N = plan.fed_len;
  fmt::print("\nposition method at context N = {} (s = N/L = {:.4g}):\n", N,
             static_cast<double>(N) / geo.train_len);
  Row("given", method.spec);
  Row("resolved (every default filled in)", CanonicalSpec(plan.method));
  if (plan.dynamic) {
    Row("scale", "dynamic: query i uses s_i = max(L, i + 1) / L (shown: the last query)");
  }
  const RotationView view = MakeRotationView(geo, plan);
  Row("attention factor (multiplies q and k)", fmt::format("{:.6g}", view.attention_factor));
  Row("logits scaled at the last query by",
      fmt::format("{:.6g} (times the model's q . k scale, 1/sqrt(head dim) unless the attention "
                  "variants say otherwise{})",
                  view.logit_scale_last, plan.logn ? "; log-n included" : ""));
  if (const std::string longrope = LongRopeSetText(plan); !longrope.empty()) {
    Row("LongRoPE factor set", longrope);
  }
  Row("relative position map", RelMapText(plan));
  Row("mask", MaskText(plan));
  Row("log-n scaling", plan.logn ? "on: logits times max(1, ln(i + 1) / ln L)" : "off");
  fmt::print("\n{}", RotationViewText(view));
}

// A trained model's attention, layer by layer, and what the method does to each layer.
void PrintLayout(const ModelHeader& header, const AttentionPlan& plan) {
  const ModelConfig& c = header.config;
  const AttentionLayout& a = c.attention;
  fmt::print("\nattention as trained (step {}):\n", header.step);
  Row("logits", fmt::format("{}{}q.k times {:.6g}{}", a.query_norm ? "QueryNorm, " : "",
                            a.key_norm ? "KeyNorm, " : "", c.LogitScale(),
                            c.LogitScale() == 1.0 / std::sqrt(static_cast<double>(c.head_dim()))
                                ? " (1/sqrt(head dim))"
                                : ""));
  Row("tokenizer", header.tokenizer_kind.empty() ? "none in the file" : header.tokenizer_kind);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerAttention la = a.Layer(l);
    std::string use;
    switch (MethodUseOf(la)) {
      case LayerMethodUse::kMethod: use = "takes the method as it is"; break;
      case LayerMethodUse::kMaskAndLogn: {
        const AttentionPlan p = LayerAttentionPlan(c, nullptr, l, plan);
        use =
            fmt::format("takes the method's mask ({}){}", MaskText(p), p.logn ? " and +logn" : "");
        break;
      }
      case LayerMethodUse::kTrainedWindow: use = "keeps its window or chunks; no method"; break;
    }
    Row(fmt::format("layer {}: {}", l, LayerAttentionText(c, l)), use);
  }
}

void RunInspect(const InspectArgs& args) {
  const ModelHeader header = ReadModelHeader(args.model);
  const SweepMethod method = OneMethodFromArgs(args.method, "inspect", &header);
  if (method.nbce) {
    Fail(
        "--method {}: NBCE reads a context as chunks and changes no position, so inspect has "
        "nothing to show for it (allowed: a position method; NBCE runs in score --tail and "
        "generate --context)",
        method.spec);
  }
  const ModelConfig& c = header.config;
  const int64_t ctx = args.ctx > 0 ? args.ctx : c.seq_len;
  // Resolved before anything is printed: a method that does not fit the model, its layer layout
  // or the context prints nothing but the error.
  const RopeGeometry geo = GeometryOf(c);
  AttentionPlan plan;
  try {
    plan = MakeAttentionPlan(method.method, geo, ctx);
    CheckMethodFitsLayout(c, plan);
  } catch (const Error& e) {
    Fail("--method {} at --ctx {}: {}", method.spec, ctx, e.what());
  }
  const int64_t params = c.ParameterCount();
  // A GGUF file's matrices kept as stored (--weights stored, the run commands' default): the
  // file's bytes of them, mapped, and each product of many rows decodes a panel of rows into a
  // float32 buffer per thread (src/kernels/ops.cc: at least 128 rows, about 4 MiB).
  const bool stored =
      WeightStorageOf(args.weights) == WeightStorage::kAsStored && !header.stored_types.empty();
  const int64_t weights =
      stored ? header.stored_weight_bytes : params * static_cast<int64_t>(sizeof(float));
  const int64_t widest = std::max<int64_t>({c.dim, c.hidden_dim, c.n_heads * c.head_dim()});
  const int64_t panels =
      stored ? NumThreads() * std::max<int64_t>(int64_t{1} << 22, 128 * 4 * widest) : 0;
  const KvCacheTypes kv_types = ResolveCacheTypes(args.cache_type);
  const int64_t kv = KvCache::BytesFor(c, ctx, kv_types);
  // A 16-bit cache also widens one layer's visible keys (each key slot) and values to float32.
  const int64_t widened = (kv_types.k != KvCacheType::kF32 ? ctx * c.kv_dim() * 4 : 0) +
                          (kv_types.v != KvCacheType::kF32 ? ctx * c.kv_dim() * 4 : 0);
  const int64_t chunk = std::min<int64_t>(ctx, Transformer::kDefaultSequenceChunk);
  const int64_t act = Transformer::ActivationBytes(c, chunk);
  // score keeps the final hidden states of the whole window and kScoreLogitRows rows of logits.
  const int64_t hidden = ctx * c.dim * static_cast<int64_t>(sizeof(float));
  const int64_t logits = kScoreLogitRows * c.vocab_size * static_cast<int64_t>(sizeof(float));

  fmt::print("model: {} ({})\n", header.path, header.format);
  Row("dim (width of the residual stream)", fmt::format("{}", c.dim));
  if (c.Gau()) {
    Row("block", "GAU (single-head Gated Attention Unit, post-norm, no feed-forward)");
    Row("expansion width E (U, V)", fmt::format("{}", c.hidden_dim));
    Row("key width S (Z, Q, K; the head dim)", fmt::format("{}", c.key_dim));
    Row("attention runs as", fmt::format("{} copies of the head (E / S), each with an S-wide "
                                         "slice of V",
                                         c.n_heads));
  } else {
    Row("block",
        c.post_norms
            ? fmt::format("Gemma's (RMSNorm before and after attention and "
                          "feed-forward, gains 1 + w, {}GeGLU, embedding times sqrt(dim))",
                          c.qk_norm ? "each head's q and k RMS-normalized before RoPE, " : "")
        : c.qkv_bias ? "LLaMA's with biases on the q, k and v projections (Qwen 2)"
        : c.qk_norm  ? "LLaMA's with each head's q and k RMS-normalized before RoPE (Qwen 3)"
                     : "LLaMA's (pre-norm RMSNorm, RoPE attention, SwiGLU, no biases)");
    Row("hidden_dim (feed-forward width)", fmt::format("{}", c.hidden_dim));
  }
  Row("layers", fmt::format("{}", c.n_layers));
  if (!c.Gau()) {
    Row("heads / kv heads (grouped-query attention)",
        fmt::format("{} / {}", c.n_heads, c.n_kv_heads));
    Row("head dim", c.explicit_head_dim > 0
                        ? fmt::format("{} (given apart from dim / heads = {:.4g})", c.head_dim(),
                                      static_cast<double>(c.dim) / c.n_heads)
                        : fmt::format("{}", c.head_dim()));
  }
  Row("vocabulary", fmt::format("{}", c.vocab_size));
  Row("trained context length (seq_len)", fmt::format("{}", c.seq_len));
  Row("classifier",
      fmt::format("{}", c.shared_classifier ? "shared with the token embedding" : "separate"));
  bool rope_full = false;  // some layer takes the method's rotation
  for (int l = 0; l < c.n_layers; ++l) {
    rope_full |= MethodUseOf(c.attention.Layer(l)) == LayerMethodUse::kMethod;
  }
  if (!c.attention.IsDefault()) Row("attention layout", AttentionLayoutText(c));
  if (const std::string v = AttentionVariantsText(c); !v.empty()) Row("attention variants", v);
  Row("RoPE base / pairs per head",
      fmt::format("{} / {} (interleaved pairs){}", c.rope_base, c.head_dim() / 2,
                  rope_full ? "" : "; no full-attention RoPE layer"));
  if (c.rope_interpolation != 1.0f) {
    Row("RoPE position interpolation (trained)",
        fmt::format("positions divided by {} (PI; any --method applies on top)",
                    c.rope_interpolation));
  }
  Row("parameters", fmt::format("{} ({:.3f} M)", params, params / 1e6));
  if (!header.provenance.empty()) {
    fmt::print("\nwhere each setting came from:\n");
    for (const std::string& line : header.provenance) fmt::print("  {}\n", line);
    fmt::print("  position method {} <- {}\n",
               header.method_spec.empty() ? "direct (plain RoPE)" : header.method_spec,
               header.method_source);
  }
  fmt::print("\nmemory at context {} ({:.1f}x the trained length):\n", ctx,
             static_cast<double>(ctx) / c.seq_len);
  Row(stored ? fmt::format("weights (as the file stores them: {})", header.stored_types)
             : std::string("weights (float32)"),
      HumanBytes(weights));
  if (stored) Row(fmt::format("decoded panels ({} threads)", NumThreads()), HumanBytes(panels));
  Row(kv_types == KvCacheTypes{}
          ? fmt::format("KV cache ({} positions)", ctx)
          : fmt::format("KV cache ({} positions, keys {}, values {})", ctx,
                        KvCacheTypeName(kv_types.k), KvCacheTypeName(kv_types.v)),
      HumanBytes(kv));
  if (widened > 0) Row("one layer widened to float32 for attention", HumanBytes(widened));
  Row(fmt::format("activations (scoring, chunks of {})", chunk), HumanBytes(act));
  Row("scoring buffers (hidden states, logits)", HumanBytes(hidden + logits));
  Row("total",
      fmt::format("{}", HumanBytes(weights + panels + kv + widened + act + hidden + logits)));
  fmt::print(
      "attention never holds a {} x {} score matrix (tiled online softmax): memory is O(ctx).\n",
      ctx, ctx);
  if (header.checkpoint) PrintLayout(header, plan);
  if (rope_full) {
    PrintMethod(method, geo, plan);
  } else {
    fmt::print(
        "\nposition method at context N = {}: {} (resolved {}); no full-attention layer "
        "rotates by RoPE, so there is no rotation view (see the layers above)\n",
        ctx, method.spec, CanonicalSpec(plan.method));
  }
}

}  // namespace

void RegisterInspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Show a checkpoint's configuration (widths, layers, heads, vocabulary, the context length it "
      "was trained at), its parameter count, and the memory needed to run it at a context "
      "length. Reads only the file's header. For a stretch checkpoint (or a run's directory: "
      "its newest checkpoint) also the attention it was trained with, layer by layer (position "
      "scheme, window, QueryNorm / KeyNorm, logit scale), its tokenizer, and what the method "
      "does to each layer.\n"
      "For a GGUF file, where each setting came from (its keys and tensors) and the position "
      "method it asks for.\n"
      "Then what the position method (--method, default the file's own or direct; or llama.cpp's "
      "flags, or --rope-scaling-json) does at that length: its resolved spec, attention factor, "
      "relative "
      "position map and mask, and per RoPE frequency pair the rotation view: the model's and the "
      "method's angle per position, the period, the turns made within the trained length and "
      "at the context, and whether the pair goes beyond the arc it met in training.\n"
      "Example: stretch inspect -m stories260K.bin --ctx 16384 --method yarn");
  sub->add_option("--model,-m", args->model,
                  "Checkpoint: a llama2.c .bin file, a stretch checkpoint (.safetensors from "
                  "`stretch train`), a training run's directory (its newest checkpoint), or a "
                  "GGUF file (told by content)")
      ->required();
  sub->add_option("--ctx,-c,--ctx-size", args->ctx,
                  "Context length for the memory estimate (default: the trained length; -c and "
                  "--ctx-size are llama.cpp's spellings)")
      ->check(Whole(1, kMaxContext));
  AddMethodOptions(sub, args->method, /*several=*/false);
  AddCacheTypeOptions(sub, args->cache_type);
  AddWeightStorageOption(sub, args->weights);
  sub->callback([args] { RunInspect(*args); });
}

}  // namespace stretch::cli
