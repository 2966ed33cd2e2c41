#include "planner/model_spec.h"

#include "gtest/gtest.h"
#include "planner/layout.h"
#include "planner/reference_refits.h"

namespace refit::planner {
namespace {

ModelTensors Expand(const std::string& name) {
  absl::StatusOr<v1::ModelConfig> config = BuiltinModelConfig(name);
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<ModelTensors> model = ExpandModel(*config);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

TEST(ModelSpecTest, DeepseekV3ParameterCountMatchesItsConfig) {
  absl::StatusOr<v1::ModelConfig> config = BuiltinModelConfig("deepseek-v3");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(Expand("deepseek-v3").ParameterCount(), config->expected_parameters());
  EXPECT_EQ(config->expected_parameters(), 671026419200);
}

TEST(ModelSpecTest, Qwen3MoeHasAbout235BParameters) {
  const int64_t count = Expand("qwen3-235b-a22b").ParameterCount();
  EXPECT_GT(count, 234'000'000'000);
  EXPECT_LT(count, 236'000'000'000);
}

const v1::RankLayout& RankOf(const v1::LayoutSpec& spec, int64_t rank) {
  for (const v1::RankLayout& r : spec.ranks()) {
    if (r.rank() == rank) return r;
  }
  ADD_FAILURE() << "no rank " << rank;
  return spec.ranks(0);
}

const v1::ShardView* ViewOf(const v1::RankLayout& rank, const std::string& tensor) {
  for (const v1::ShardView& v : rank.views()) {
    if (v.tensor() == tensor) return &v;
  }
  return nullptr;
}

TEST(ModelSpecTest, MegatronStagesExpertsAndRankOrder) {
  const ModelTensors model = Expand("dsv3-mini");  // 6 layers, 32 experts
  absl::StatusOr<v1::ParallelConfig> parallel = ParseParallel("pp=4,ep=2,tp=2");
  ASSERT_TRUE(parallel.ok());
  absl::StatusOr<v1::LayoutSpec> spec = TrainingLayout(model, *parallel, "train-");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->ranks_size(), 16);
  // 6 layers over 4 stages: 2, 2, 1, 1 (earlier stages take the remainder).
  EXPECT_NE(ViewOf(RankOf(*spec, 0), "model.layers.1.input_layernorm.weight"), nullptr);
  EXPECT_NE(ViewOf(RankOf(*spec, 4), "model.layers.3.input_layernorm.weight"), nullptr);
  EXPECT_NE(ViewOf(RankOf(*spec, 8), "model.layers.4.input_layernorm.weight"), nullptr);
  EXPECT_NE(ViewOf(RankOf(*spec, 12), "model.layers.5.input_layernorm.weight"), nullptr);
  EXPECT_NE(ViewOf(RankOf(*spec, 0), "model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(ViewOf(RankOf(*spec, 0), "lm_head.weight"), nullptr);
  EXPECT_NE(ViewOf(RankOf(*spec, 15), "lm_head.weight"), nullptr);
  // Rank 3 = tp 1, ep 1, stage 0: q_b column half 1; experts 16..31, whole inside (etp 1).
  const v1::ShardView* q_b = ViewOf(RankOf(*spec, 3), "model.layers.0.self_attn.q_b_proj.weight");
  ASSERT_NE(q_b, nullptr);
  EXPECT_EQ(q_b->offset(0), 16 * 48 / 2);
  const v1::ShardView* up = ViewOf(RankOf(*spec, 3), "model.layers.1.mlp.experts.w_up");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->offset(0), 16);
  EXPECT_EQ(up->extent(0), 16);
  EXPECT_EQ(up->extent(1), 512);
  const v1::ShardView* o = ViewOf(RankOf(*spec, 3), "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(o->offset(1), 16 * 32 / 2);  // row-parallel: dim 1
}

TEST(ModelSpecTest, VllmShardsExpertsInsideEveryExpert) {
  const ModelTensors model = Expand("dsv3-mini");
  absl::StatusOr<v1::LayoutSpec> spec = InferenceLayout(model, *ParseParallel("tp=4,dp=2"), "i-");
  ASSERT_TRUE(spec.ok());
  ASSERT_EQ(spec->ranks_size(), 8);
  const v1::ShardView* down = ViewOf(RankOf(*spec, 6), "model.layers.2.mlp.experts.w_down");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->extent(0), 32);
  EXPECT_EQ(down->offset(2), 2 * 128);  // rank 6 = tp 2 of dp 1
  EXPECT_EQ(RankOf(*spec, 6).host(), "i-0");
  EXPECT_EQ(RankOf(*spec, 6).device(), 6);
}

TEST(ModelSpecTest, KvHeadsReplicateWhenTpExceedsThem) {
  const ModelTensors model = Expand("qwen3-235b-a22b");  // 4 KV heads of 128
  absl::StatusOr<v1::LayoutSpec> spec = InferenceLayout(model, *ParseParallel("tp=8"), "i-");
  ASSERT_TRUE(spec.ok());
  for (int64_t rank = 0; rank < 8; ++rank) {
    const v1::ShardView* k = ViewOf(RankOf(*spec, rank), "model.layers.0.self_attn.k_proj.weight");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->offset(0), rank / 2 * 128);
    EXPECT_EQ(k->extent(0), 128);
  }
}

TEST(ModelSpecTest, UnevenSplitsAreTorchChunk) {
  const ModelTensors model = Expand("dsv3-mini");
  // 16 heads * 48 = 768 rows over tp=5: chunks of 154, the last 152.
  absl::StatusOr<v1::LayoutSpec> spec = InferenceLayout(model, *ParseParallel("tp=5"), "i-");
  ASSERT_TRUE(spec.ok());
  const v1::ShardView* last = ViewOf(RankOf(*spec, 4), "model.layers.0.self_attn.q_b_proj.weight");
  EXPECT_EQ(last->offset(0), 4 * 154);
  EXPECT_EQ(last->extent(0), 768 - 4 * 154);
}

TEST(ModelSpecTest, ReferenceLayoutsCompile) {
  for (const std::string& name : ReferenceRefitNames()) {
    absl::StatusOr<RefitScenario> scenario = ReferenceRefit(name);
    ASSERT_TRUE(scenario.ok()) << name << ": " << scenario.status();
    EXPECT_TRUE(CompileLayout(scenario->sources, "source").ok()) << name;
    EXPECT_TRUE(CompileLayout(scenario->destinations, "destination").ok()) << name;
  }
}

// FSDP2 (DTensor Shard(0)): dim 0 in torch.chunk pieces, uneven and empty ones included,
// replicas (HSDP) after the shard index; every element held once per replica.
TEST(ModelSpecTest, FsdpCutsDimZeroAsTorchChunkDoes) {
  const ModelTensors model = Expand("dsv3-mini");
  absl::StatusOr<v1::LayoutSpec> spec = TrainingLayout(model, *ParseParallel("fsdp=5,dp=2"), "t-");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->ranks_size(), 10);
  for (const ModelTensor& t : model.tensors) {
    const int64_t rows = t.shape[0], chunk = (rows + 4) / 5;
    for (int replica = 0; replica < 2; ++replica) {
      int64_t next = 0;
      for (int shard = 0; shard < 5; ++shard) {
        const v1::ShardView* view = ViewOf(RankOf(*spec, replica * 5 + shard), t.name);
        const int64_t expected = std::max<int64_t>(0, std::min(chunk, rows - shard * chunk));
        if (expected == 0) {
          EXPECT_EQ(view, nullptr) << t.name << " shard " << shard;
          continue;
        }
        ASSERT_NE(view, nullptr) << t.name << " shard " << shard;
        EXPECT_EQ(view->offset(0), next) << t.name;
        EXPECT_EQ(view->extent(0), expected) << t.name;
        for (int d = 1; d < view->extent_size(); ++d) EXPECT_EQ(view->extent(d), t.shape[d]);
        next += expected;
      }
      EXPECT_EQ(next, rows) << t.name;
    }
  }
  absl::StatusOr<v1::LayoutSpec> with_tp =
      TrainingLayout(model, *ParseParallel("fsdp=4,tp=2"), "t-");
  ASSERT_FALSE(with_tp.ok());
  EXPECT_NE(with_tp.status().message().find("fsdp=4 with tp=2 is not supported"), std::string::npos)
      << with_tp.status();
}

TEST(ModelSpecTest, BadParallelSettings) {
  EXPECT_FALSE(ParseParallel("pp=0").ok());
  EXPECT_FALSE(ParseParallel("xx=2").ok());
  EXPECT_NE(ParseParallel("tp=two").status().message().find("tp=two"), std::string::npos);
  const ModelTensors model = Expand("dsv3-mini");
  EXPECT_FALSE(TrainingLayout(model, *ParseParallel("pp=7"), "t-").ok());  // 6 layers
  EXPECT_FALSE(TrainingLayout(model, *ParseParallel("tp=4,etp=3"), "t-").ok());
  v1::ModelConfig unknown;
  unknown.set_name("x");
  unknown.set_architecture("llama");
  unknown.set_vocab_size(8);
  unknown.set_hidden_size(8);
  unknown.set_num_hidden_layers(1);
  EXPECT_NE(ExpandModel(unknown).status().message().find("unknown architecture"),
            std::string::npos);
}

}  // namespace
}  // namespace refit::planner
