#include "planner/model_spec.h"

#include <algorithm>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "planner/dtype.h"

namespace refit::planner {
namespace {

std::string SafetensorsDtype(const std::string& config_dtype) {
  if (config_dtype == "bf16" || config_dtype == "bfloat16" || config_dtype.empty()) return "BF16";
  if (config_dtype == "fp16" || config_dtype == "float16") return "F16";
  if (config_dtype == "fp32" || config_dtype == "float32") return "F32";
  if (config_dtype == "fp8" || config_dtype == "float8_e4m3fn") return "F8_E4M3";
  return config_dtype;
}

absl::Status RequirePositive(const v1::ModelConfig& c, const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("model ", c.name(), ": field ", field, " must be positive"));
}

void Add(ModelTensors* m, std::string name, Dims shape, ShardRule rule, int64_t layer) {
  m->tensors.push_back(ModelTensor{std::move(name), std::move(shape), rule, layer});
}

void AddRoutedExperts(ModelTensors* m, const std::string& p, int64_t experts, int64_t mi, int64_t h,
                      int64_t layer) {
  Add(m, p + "mlp.experts.w_gate", {experts, mi, h}, ShardRule::kExpertUp, layer);
  Add(m, p + "mlp.experts.w_up", {experts, mi, h}, ShardRule::kExpertUp, layer);
  Add(m, p + "mlp.experts.w_down", {experts, h, mi}, ShardRule::kExpertDown, layer);
}

absl::Status ExpandDeepseekLayers(const v1::ModelConfig& c, ModelTensors* m) {
  for (auto [field, value] : {std::pair{"hidden_size", c.hidden_size()},
                              {"num_attention_heads", c.num_attention_heads()},
                              {"q_lora_rank", c.q_lora_rank()},
                              {"kv_lora_rank", c.kv_lora_rank()},
                              {"qk_nope_head_dim", c.qk_nope_head_dim()},
                              {"qk_rope_head_dim", c.qk_rope_head_dim()},
                              {"v_head_dim", c.v_head_dim()},
                              {"moe_intermediate_size", c.moe_intermediate_size()},
                              {"n_routed_experts", c.n_routed_experts()}}) {
    absl::Status s = RequirePositive(c, field, value);
    if (!s.ok()) return s;
  }
  const int64_t h = c.hidden_size(), heads = c.num_attention_heads();
  const int64_t experts = c.n_routed_experts(), mi = c.moe_intermediate_size();
  for (int64_t i = 0; i < c.num_hidden_layers(); ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    Add(m, p + "input_layernorm.weight", {h}, ShardRule::kReplicated, i);
    Add(m, p + "post_attention_layernorm.weight", {h}, ShardRule::kReplicated, i);
    Add(m, p + "self_attn.q_a_proj.weight", {c.q_lora_rank(), h}, ShardRule::kReplicated, i);
    Add(m, p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank()}, ShardRule::kReplicated, i);
    Add(m, p + "self_attn.q_b_proj.weight",
        {heads * (c.qk_nope_head_dim() + c.qk_rope_head_dim()), c.q_lora_rank()},
        ShardRule::kColumn, i);
    Add(m, p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank() + c.qk_rope_head_dim(), h},
        ShardRule::kReplicated, i);
    Add(m, p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank()}, ShardRule::kReplicated, i);
    Add(m, p + "self_attn.kv_b_proj.weight",
        {heads * (c.qk_nope_head_dim() + c.v_head_dim()), c.kv_lora_rank()}, ShardRule::kColumn, i);
    Add(m, p + "self_attn.o_proj.weight", {h, heads * c.v_head_dim()}, ShardRule::kRow, i);
    if (i < c.first_k_dense_replace()) {
      const int64_t inter = c.intermediate_size();
      Add(m, p + "mlp.gate_proj.weight", {inter, h}, ShardRule::kColumn, i);
      Add(m, p + "mlp.up_proj.weight", {inter, h}, ShardRule::kColumn, i);
      Add(m, p + "mlp.down_proj.weight", {h, inter}, ShardRule::kRow, i);
      continue;
    }
    Add(m, p + "mlp.gate.weight", {experts, h}, ShardRule::kReplicated, i);
    Add(m, p + "mlp.gate.e_score_correction_bias", {experts}, ShardRule::kReplicated, i);
    const int64_t shared = mi * std::max<int64_t>(1, c.n_shared_experts());
    Add(m, p + "mlp.shared_experts.gate_proj.weight", {shared, h}, ShardRule::kColumn, i);
    Add(m, p + "mlp.shared_experts.up_proj.weight", {shared, h}, ShardRule::kColumn, i);
    Add(m, p + "mlp.shared_experts.down_proj.weight", {h, shared}, ShardRule::kRow, i);
    AddRoutedExperts(m, p, experts, mi, h, i);
  }
  return absl::OkStatus();
}

absl::Status ExpandQwen3MoeLayers(const v1::ModelConfig& c, ModelTensors* m) {
  for (auto [field, value] : {std::pair{"hidden_size", c.hidden_size()},
                              {"num_attention_heads", c.num_attention_heads()},
                              {"num_key_value_heads", c.num_key_value_heads()},
                              {"head_dim", c.head_dim()},
                              {"moe_intermediate_size", c.moe_intermediate_size()},
                              {"num_experts", c.num_experts()}}) {
    absl::Status s = RequirePositive(c, field, value);
    if (!s.ok()) return s;
  }
  const int64_t h = c.hidden_size(), hd = c.head_dim();
  m->kv_heads = c.num_key_value_heads();
  m->head_dim = hd;
  for (int64_t i = 0; i < c.num_hidden_layers(); ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    Add(m, p + "input_layernorm.weight", {h}, ShardRule::kReplicated, i);
    Add(m, p + "post_attention_layernorm.weight", {h}, ShardRule::kReplicated, i);
    Add(m, p + "self_attn.q_proj.weight", {c.num_attention_heads() * hd, h}, ShardRule::kColumn, i);
    Add(m, p + "self_attn.k_proj.weight", {m->kv_heads * hd, h}, ShardRule::kKvColumn, i);
    Add(m, p + "self_attn.v_proj.weight", {m->kv_heads * hd, h}, ShardRule::kKvColumn, i);
    Add(m, p + "self_attn.o_proj.weight", {h, c.num_attention_heads() * hd}, ShardRule::kRow, i);
    Add(m, p + "self_attn.q_norm.weight", {hd}, ShardRule::kReplicated, i);
    Add(m, p + "self_attn.k_norm.weight", {hd}, ShardRule::kReplicated, i);
    Add(m, p + "mlp.gate.weight", {c.num_experts(), h}, ShardRule::kReplicated, i);
    AddRoutedExperts(m, p, c.num_experts(), c.moe_intermediate_size(), h, i);
  }
  return absl::OkStatus();
}

// torch.chunk: chunks of ceil(n / parts); the chunk may be empty (extent 0).
std::pair<int64_t, int64_t> Chunk(int64_t n, int64_t parts, int64_t index) {
  const int64_t size = (n + parts - 1) / parts;
  const int64_t begin = std::min(n, size * index);
  return {begin, std::min(n, begin + size) - begin};
}

int64_t OrOne(int64_t value) { return value > 0 ? value : 1; }

int64_t GpusPerNode(const v1::ParallelConfig& parallel) {
  return parallel.gpus_per_node() > 0 ? parallel.gpus_per_node() : 8;
}

struct ShardPlace {
  int64_t tp_size = 1, tp_index = 0;    // dense tensor parallelism
  int64_t ep_size = 1, ep_index = 0;    // experts along dim 0
  int64_t etp_size = 1, etp_index = 0;  // tensor parallelism inside an expert
};

// The box of `tensor` a rank at `place` holds; extent 0 somewhere means none.
Box ShardBox(const ModelTensors& model, const ModelTensor& tensor, const ShardPlace& place) {
  Box box;
  box.offset.assign(tensor.shape.size(), 0);
  box.extent = tensor.shape;
  auto split = [&](size_t dim, int64_t parts, int64_t index) {
    auto [begin, size] = Chunk(tensor.shape[dim], parts, index);
    box.offset[dim] = begin;
    box.extent[dim] = size;
  };
  switch (tensor.rule) {
    case ShardRule::kReplicated:
      break;
    case ShardRule::kColumn:
      split(0, place.tp_size, place.tp_index);
      break;
    case ShardRule::kRow:
      split(1, place.tp_size, place.tp_index);
      break;
    case ShardRule::kKvColumn:
      if (place.tp_size <= model.kv_heads) {
        split(0, place.tp_size, place.tp_index);
      } else {
        const int64_t head = place.tp_index * model.kv_heads / place.tp_size;
        box.offset[0] = head * model.head_dim;
        box.extent[0] = model.head_dim;
      }
      break;
    case ShardRule::kExpertUp:
    case ShardRule::kExpertDown:
      split(0, place.ep_size, place.ep_index);
      split(tensor.rule == ShardRule::kExpertUp ? 1 : 2, place.etp_size, place.etp_index);
      break;
  }
  return box;
}

void AddView(const ModelTensor& tensor, const Box& box, v1::RankLayout* rank) {
  if (box.Empty()) return;
  v1::ShardView* view = rank->add_views();
  view->set_tensor(tensor.name);
  for (size_t d = 0; d < box.rank(); ++d) {
    view->add_offset(box.offset[d]);
    view->add_extent(box.extent[d]);
  }
}

v1::LayoutSpec LayoutHeader(const ModelTensors& model) {
  v1::LayoutSpec spec;
  for (const ModelTensor& t : model.tensors) {
    v1::TensorSpec* tensor = spec.add_tensors();
    tensor->set_name(t.name);
    tensor->set_dtype(model.dtype);
    tensor->mutable_shape()->Assign(t.shape.begin(), t.shape.end());
  }
  return spec;
}

v1::RankLayout* AddRank(int64_t rank, const std::string& host_prefix, int64_t gpus_per_node,
                        v1::LayoutSpec* spec) {
  v1::RankLayout* layout = spec->add_ranks();
  layout->set_rank(rank);
  layout->set_host(absl::StrCat(host_prefix, rank / gpus_per_node));
  layout->set_device(static_cast<int32_t>(rank % gpus_per_node));
  return layout;
}

// FSDP2's layout (DTensor Shard(0) on the shard mesh axis, Replicate() on the replicate
// axis): ranks ordered shard index fastest, then replica; each parameter's dim 0 cut as
// torch.chunk cuts it (pieces of ceil(n / fsdp) rows, the last ones shorter or empty).
absl::StatusOr<v1::LayoutSpec> FsdpLayout(const ModelTensors& model,
                                          const v1::ParallelConfig& parallel,
                                          const std::string& host_prefix) {
  const int64_t fsdp = OrOne(parallel.fsdp()), dp = OrOne(parallel.dp());
  const int64_t gpus_per_node = GpusPerNode(parallel);
  for (auto [key, value] : {std::pair{"tp", parallel.tp()},
                            {"pp", parallel.pp()},
                            {"ep", parallel.ep()},
                            {"etp", parallel.etp()}}) {
    if (OrOne(value) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("training layout: fsdp=", fsdp, " with ", key, "=", value,
                       " is not supported (fsdp combines with dp only, as HSDP)"));
    }
  }
  v1::LayoutSpec spec = LayoutHeader(model);
  for (int64_t rank = 0; rank < fsdp * dp; ++rank) {
    const int64_t shard = rank % fsdp;
    v1::RankLayout* layout = AddRank(rank, host_prefix, gpus_per_node, &spec);
    for (const ModelTensor& t : model.tensors) {
      Box box{Dims(t.shape.size(), 0), t.shape};
      std::tie(box.offset[0], box.extent[0]) = Chunk(t.shape[0], fsdp, shard);
      AddView(t, box, layout);
    }
  }
  return spec;
}

}  // namespace

int64_t ModelTensors::ParameterCount() const {
  int64_t total = 0;
  for (const ModelTensor& t : tensors) {
    int64_t v = 1;
    for (int64_t d : t.shape) v *= d;
    total += v;
  }
  return total;
}

absl::StatusOr<ModelTensors> ExpandModel(const v1::ModelConfig& config) {
  ModelTensors model;
  model.dtype = SafetensorsDtype(config.dtype());
  absl::StatusOr<int> dtype_bytes = DtypeBytes(model.dtype);
  if (!dtype_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", config.name(), ": ", dtype_bytes.status().message()));
  }
  for (auto [field, value] : {std::pair{"vocab_size", config.vocab_size()},
                              {"hidden_size", config.hidden_size()},
                              {"num_hidden_layers", config.num_hidden_layers()}}) {
    absl::Status s = RequirePositive(config, field, value);
    if (!s.ok()) return s;
  }
  model.num_layers = config.num_hidden_layers();
  const int64_t v = config.vocab_size(), h = config.hidden_size();
  Add(&model, "model.embed_tokens.weight", {v, h}, ShardRule::kColumn, -1);
  model.tensors.back().first_stage = true;
  absl::Status layers;
  if (config.architecture() == "deepseek_v3") {
    layers = ExpandDeepseekLayers(config, &model);
  } else if (config.architecture() == "qwen3_moe") {
    layers = ExpandQwen3MoeLayers(config, &model);
  } else {
    layers = absl::InvalidArgumentError(
        absl::StrCat("model ", config.name(), ": unknown architecture \"", config.architecture(),
                     "\" (expected deepseek_v3 or qwen3_moe)"));
  }
  if (!layers.ok()) return layers;
  Add(&model, "model.norm.weight", {h}, ShardRule::kReplicated, -1);
  model.tensors.back().last_stage = true;
  if (!config.tie_word_embeddings()) {
    Add(&model, "lm_head.weight", {v, h}, ShardRule::kColumn, -1);
    model.tensors.back().last_stage = true;
  }
  return model;
}

absl::StatusOr<v1::ParallelConfig> ParseParallel(absl::string_view text) {
  v1::ParallelConfig parallel;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    int64_t value = 0;
    if (!absl::SimpleAtoi(kv.second, &value) || value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel setting \"", text, "\": \"", item, "\" needs a positive integer"));
    }
    if (kv.first == "pp")
      parallel.set_pp(value);
    else if (kv.first == "ep")
      parallel.set_ep(value);
    else if (kv.first == "tp")
      parallel.set_tp(value);
    else if (kv.first == "dp")
      parallel.set_dp(value);
    else if (kv.first == "etp")
      parallel.set_etp(value);
    else if (kv.first == "fsdp")
      parallel.set_fsdp(value);
    else if (kv.first == "gpus_per_node" || kv.first == "gpus-per-node")
      parallel.set_gpus_per_node(value);
    else {
      return absl::InvalidArgumentError(absl::StrCat("parallel setting \"", text,
                                                     "\": unknown key \"", kv.first,
                                                     "\" (expected pp, ep, tp, dp, etp, fsdp)"));
    }
  }
  return parallel;
}

absl::StatusOr<v1::LayoutSpec> TrainingLayout(const ModelTensors& model,
                                              const v1::ParallelConfig& parallel,
                                              const std::string& host_prefix) {
  if (OrOne(parallel.fsdp()) > 1) return FsdpLayout(model, parallel, host_prefix);
  const int64_t tp = OrOne(parallel.tp()), pp = OrOne(parallel.pp());
  const int64_t ep = OrOne(parallel.ep()), dp = OrOne(parallel.dp());
  const int64_t etp = OrOne(parallel.etp());
  const int64_t gpus_per_node = GpusPerNode(parallel);
  if (tp % etp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training layout: etp=", etp, " must divide tp=", tp));
  }
  if (pp > model.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("training layout: pp=", pp, " exceeds the ", model.num_layers, " layers"));
  }
  v1::LayoutSpec spec = LayoutHeader(model);
  // Stages: contiguous layer ranges, earlier stages take the remainder.
  const int64_t base = model.num_layers / pp, extra = model.num_layers % pp;
  auto stage_of_layer = [&](int64_t layer) {
    const int64_t big = extra * (base + 1);
    return layer < big ? layer / (base + 1) : extra + (layer - big) / base;
  };
  for (int64_t rank = 0; rank < tp * ep * dp * pp; ++rank) {
    const int64_t tp_i = rank % tp, ep_i = rank / tp % ep, pp_i = rank / (tp * ep * dp);
    v1::RankLayout* layout = AddRank(rank, host_prefix, gpus_per_node, &spec);
    const ShardPlace place{tp, tp_i, ep, ep_i, etp, tp_i % etp};
    for (const ModelTensor& t : model.tensors) {
      const bool here = t.layer >= 0
                            ? stage_of_layer(t.layer) == pp_i
                            : (t.first_stage && pp_i == 0) || (t.last_stage && pp_i == pp - 1);
      if (here) AddView(t, ShardBox(model, t, place), layout);
    }
  }
  return spec;
}

absl::StatusOr<v1::LayoutSpec> InferenceLayout(const ModelTensors& model,
                                               const v1::ParallelConfig& parallel,
                                               const std::string& host_prefix) {
  const int64_t tp = OrOne(parallel.tp()), dp = OrOne(parallel.dp()), ep = OrOne(parallel.ep());
  const int64_t gpus_per_node = GpusPerNode(parallel);
  if (OrOne(parallel.pp()) != 1) {
    return absl::InvalidArgumentError("inference layout: pp is not supported (use tp and dp)");
  }
  if ((tp * dp) % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("inference layout: ep=", ep, " must divide tp*dp=", tp * dp));
  }
  v1::LayoutSpec spec = LayoutHeader(model);
  for (int64_t rank = 0; rank < tp * dp; ++rank) {
    const int64_t tp_i = rank % tp;
    v1::RankLayout* layout = AddRank(rank, host_prefix, gpus_per_node, &spec);
    // Without EP, experts are TP-sharded inside every expert; with EP, split along dim 0.
    const ShardPlace place =
        ep > 1 ? ShardPlace{tp, tp_i, ep, rank % ep, 1, 0} : ShardPlace{tp, tp_i, 1, 0, tp, tp_i};
    for (const ModelTensor& t : model.tensors) AddView(t, ShardBox(model, t, place), layout);
  }
  return spec;
}

}  // namespace refit::planner
