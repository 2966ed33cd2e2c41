// End-to-end tests of the real refitctl binary: exit codes, the JSON report, and one-line
// errors that name the tensor, the rank and the box.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

CommandResult Refitctl(const std::string& args) {
  const std::string out = TempPath("stdout.txt"), err = TempPath("stderr.txt");
  const std::string command = "client/refitctl " + args + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  CommandResult run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = Slurp(out);
  run.err = Slurp(err);
  return run;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

const char kSources[] = R"({"tensors": [{"name": "w", "dtype": "BF16", "shape": [1024, 4096]}],
 "ranks": [{"rank": 0, "host": "node-0", "device": 0,
            "views": [{"tensor": "w", "offset": [0, 0], "extent": [512, 4096]}]},
           {"rank": 1, "host": "node-0", "device": 1,
            "views": [{"tensor": "w", "offset": [512, 0], "extent": [512, 4096]}]}]})";

const char kDestinations[] = R"({"tensors": [{"name": "w", "dtype": "BF16", "shape": [1024, 4096]}],
 "ranks": [{"rank": 0, "host": "node-1", "device": 0,
            "views": [{"tensor": "w", "offset": [0, 0], "extent": [1024, 2048]}]},
           {"rank": 1, "host": "node-1", "device": 1,
            "views": [{"tensor": "w", "offset": [0, 2048], "extent": [1024, 2048]}]}]})";

TEST(RefitctlTest, PlansLayoutFilesAndVerifiesBytes) {
  const std::string src = WriteFile("src.json", kSources);
  const std::string dst = WriteFile("dst.json", kDestinations);
  const CommandResult run =
      Refitctl("plan --src " + src + " --dst " + dst + " --verify=bytes --json");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  for (const char* key :
       {"\"strategy\": \"reshard\"", "\"transfers\": 4", "\"total_bytes\": 8388608",
        "\"network_bytes\": 8388608", "\"lower_bound_network_bytes\": 8388608",
        "\"max_link_bytes\"", "\"predicted_seconds\"", "\"lower_bound_seconds\"",
        "\"plan_seconds\"", "\"digest\"", "\"verified\": true"}) {
    EXPECT_TRUE(absl::StrContains(run.out, key)) << key << " in " << run.out;
  }
}

TEST(RefitctlTest, TopologyFilePlacesHostsInOneNvlinkDomain) {
  const std::string src = WriteFile("src.json", kSources);
  const std::string dst = WriteFile("dst.json", kDestinations);
  const std::string topology =
      WriteFile("topology.json", R"({"hosts": [{"host": "node-0", "nvlinkDomain": "rack"},
                                      {"host": "node-1", "nvlink_domain": "rack"}]})");
  const CommandResult run =
      Refitctl("plan --src " + src + " --dst " + dst + " --topology " + topology + " --json");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "\"network_bytes\": 0,")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "\"nvlink_bytes\": 8388608")) << run.out;
}

TEST(RefitctlTest, WritesThePlanAsProtoJson) {
  const std::string src = WriteFile("src.json", kSources);
  const std::string dst = WriteFile("dst.json", kDestinations);
  const std::string plan = TempPath("plan.json");
  const CommandResult run = Refitctl("plan --src " + src + " --dst " + dst + " --plan-out " + plan);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string json = Slurp(plan);
  EXPECT_TRUE(absl::StrContains(json, "\"strategy\":\"reshard\"")) << json;
  // Source rank 0 rows [0, 512) reach destination rank 1 columns [2048, 4096).
  EXPECT_TRUE(absl::StrContains(
      json,
      "\"src\":{\"kind\":\"ENDPOINT_SOURCE_VIEW\"},\"dst\":{\"kind\":"
      "\"ENDPOINT_DESTINATION_VIEW\",\"rank\":\"1\"},\"tensor\":\"w\",\"offset\":[\"0\","
      "\"2048\"],\"extent\":[\"512\",\"2048\"]"))
      << json;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(RefitctlTest, DrawsTheTransferMatrixAndLinkLoads) {
  // The two source ranks on two hosts (two NVLink domains), the destinations on a third.
  std::string sources = kSources;
  sources.replace(sources.rfind("node-0"), 6, "node-2");
  const std::string src = WriteFile("src.json", sources);
  const std::string dst = WriteFile("dst.json", kDestinations);
  const std::string svg_path = TempPath("plan.svg");
  const CommandResult run = Refitctl("plan --src " + src + " --dst " + dst + " --svg " + svg_path);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string svg = Slurp(svg_path);
  EXPECT_TRUE(absl::StartsWith(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"")) << svg;
  EXPECT_TRUE(absl::EndsWith(svg, "</svg>\n"));
  // Every source rank sends each destination rank a quarter of w (512 x 2048 BF16).
  for (const char* pair : {"source rank 0 to destination rank 0: 2.1 MB",
                           "source rank 0 to destination rank 1: 2.1 MB",
                           "source rank 1 to destination rank 0: 2.1 MB",
                           "source rank 1 to destination rank 1: 2.1 MB"}) {
    EXPECT_EQ(Count(svg, pair), 1) << pair;
  }
  // One boundary between the sources' two domains (rows); the destinations share one.
  EXPECT_EQ(Count(svg, "class=\"domain\""), 1) << svg;
  // Four GPUs' busiest links: the sources' NIC out, the destinations' NIC in.
  EXPECT_EQ(Count(svg, ": NIC out "), 2) << svg;
  EXPECT_EQ(Count(svg, ": NIC in "), 2) << svg;
  EXPECT_EQ(Count(svg, "id=\"lower-bound\""), 1);
}

TEST(RefitctlTest, DoctorSaysWhatIsMissingAndWhatToDo) {
  const std::string socket = TempPath("no-such-refitd.sock");
  CommandResult run = Refitctl("doctor --socket " + socket + " --shm-need 1000000GiB");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(
      run.out, "refitd socket    FAIL  " + socket + ": No such file or directory\n"))
      << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "fix: start refitd")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "shared memory    FAIL  /dev/shm: ")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "UCX              ok    UCX 1.")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "GPU, CUDA, NCCL  ")) << run.out;
  EXPECT_TRUE(absl::EndsWith(run.out, "something needs fixing (FAIL above)\n")) << run.out;

  run = Refitctl("doctor --socket " + socket + " --json");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(run.out, "[{\"check\": \"refitd socket\", \"status\": \"FAIL\""))
      << run.out;
  EXPECT_EQ(Refitctl("doctor --shm-need lots").exit_code, 2);
}

TEST(RefitctlTest, ALiveCommandWhoseCallFailsExitsThreeNamingTheCode) {
  // Nothing listens on port 1: the call fails, it is not a verification failure.
  for (const std::string command : {"status", "layouts", "refit --version 1 --timeout-ms 300"}) {
    const CommandResult run = Refitctl(command + " --coordinator 127.0.0.1:1 --json");
    EXPECT_EQ(run.exit_code, 3) << command << ": " << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, ": UNAVAILABLE: ") ||
                absl::StrContains(run.err, ": DEADLINE_EXCEEDED: "))
        << command << ": " << run.err;
    EXPECT_EQ(run.out, "") << command;
  }
}

// kDestinations held in block-scaled FP8: the codes of w and one F32 scale per 128 x 128
// block, each rank holding the scales of its columns' blocks.
const char kFp8Destinations[] = R"({"tensors": [
   {"name": "w", "dtype": "F8_E4M3", "shape": [1024, 4096],
    "quantization": {"scheme": "block_fp8", "scale_tensor": "w_scale_inv"}},
   {"name": "w_scale_inv", "dtype": "F32", "shape": [8, 32]}],
 "ranks": [{"rank": 0, "host": "node-1", "device": 0,
            "views": [{"tensor": "w", "offset": [0, 0], "extent": [1024, 2048]},
                      {"tensor": "w_scale_inv", "offset": [0, 0], "extent": [8, 16]}]},
           {"rank": 1, "host": "node-1", "device": 1,
            "views": [{"tensor": "w", "offset": [0, 2048], "extent": [1024, 2048]},
                      {"tensor": "w_scale_inv", "offset": [0, 16], "extent": [8, 16]}]}]})";

TEST(RefitctlTest, PlansFp8DestinationsMovingCodesAndScales) {
  const std::string src = WriteFile("src.json", kSources);
  const std::string dst = WriteFile("fp8.json", kFp8Destinations);
  const CommandResult run =
      Refitctl("plan --src " + src + " --dst " + dst + " --verify=bytes --json");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  // One byte per element and 4 per block, against 2 per element in BF16.
  for (const char* key : {"\"total_bytes\": 4195328", "\"network_bytes\": 4195328",
                          "\"unquantized_network_bytes\": 8388608",
                          "\"quantization_saved_network_bytes\": 4193280", "\"verified\": true"}) {
    EXPECT_TRUE(absl::StrContains(run.out, key)) << key << " in " << run.out;
  }
  const CommandResult table = Refitctl("plan --src " + src + " --dst " + dst);
  EXPECT_TRUE(absl::StrContains(
      table.out, "quantization    network 4.2 MB vs 8.4 MB in the sources' precision (0.500x"))
      << table.out;
}

TEST(RefitctlTest, Fp8DestinationsWhoseShardsCutBlocksAreRefusedByName) {
  // vLLM's TP32 gives each rank 576 rows of a dense layer's gate_proj: 4.5 blocks.
  const CommandResult run = Refitctl("plan --refit dsv3-h100 --dst-quantization block_fp8");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "refitctl plan: destination rank 0: view 10 of \"model.layers.0.mlp.gate_proj.weight\" "
            "holds [0:576, 0:7168], which cuts its 128 x 128 quantization blocks (a view of a "
            "quantized tensor starts at a block corner and ends at a block edge or the tensor's "
            "end, in the dims its blocks tile)\n");
  const CommandResult mini =
      Refitctl("plan --refit mini --dst-quantization block_fp8 --verify=bytes");
  EXPECT_EQ(mini.exit_code, 0) << mini.err;
  EXPECT_TRUE(absl::StrContains(mini.out, "verified        yes")) << mini.out;
}

TEST(RefitctlTest, Fp8DestinationsFromFsdpTrainersQuantizeCutBlocksOnArrival) {
  // FSDP2 over 3 trainers: torch.chunk rows (342 of 1024) cut 128-row blocks; those tensors
  // cross in BF16 and are quantized on arrival, the others in codes.
  const CommandResult run = Refitctl(
      "plan --model dsv3-mini --src-parallel fsdp=3 --dst-parallel tp=2,dp=2 "
      "--dst-quantization block_fp8 --verify=bytes --json");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "\"verified\": true")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "\"tensors_quantized_on_arrival\": 42")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "\"tensors_dequantized\": 0")) << run.out;
  // Megatron's PP x EP trainers hold whole blocks: everything crosses in codes.
  const CommandResult whole = Refitctl("plan --refit mini --dst-quantization block_fp8 --json");
  EXPECT_TRUE(absl::StrContains(whole.out, "\"tensors_quantized_on_arrival\": 0")) << whole.out;
}

TEST(RefitctlTest, ReadableTableWithoutJson) {
  const CommandResult run = Refitctl("plan --refit mini --strategy gather_broadcast");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "strategy        gather_broadcast")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "predicted time")) << run.out;
  EXPECT_FALSE(absl::StrContains(run.out, "verified"));
}

TEST(RefitctlTest, AutoSaysWhichPlanItChoseOverWhich) {
  const CommandResult run = Refitctl("plan --refit mini --strategy auto");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  // Every candidate priced, the chosen one first with its predicted seconds.
  EXPECT_TRUE(absl::StrContains(run.out, "chosen          reshard_")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, ", over ")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "gather_broadcast ")) << run.out;
  const CommandResult json = Refitctl("plan --refit mini --strategy auto --json");
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(absl::StrContains(json.out, "\"candidate_gather_broadcast_seconds\"")) << json.out;
}

TEST(RefitctlTest, DeepseekV3AtFullScaleMeetsTheBoundAndCoverage) {
  const CommandResult run = Refitctl(
      "plan --model deepseek-v3 --src-parallel pp=16,ep=16 --dst-parallel tp=32,dp=8 "
      "--gpus-per-node 8 --verify=coverage --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "\"network_bytes\": 10785906851840")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "\"lower_bound_network_bytes\": 10785906851840"));
  EXPECT_TRUE(absl::StrContains(run.out, "\"source_ranks\": 256"));
  EXPECT_TRUE(absl::StrContains(run.out, "\"verified\": true"));
}

TEST(RefitctlTest, MalformedJsonExitsTwoWithOneLine) {
  const std::string bad = WriteFile("bad.json", "{\"tensors\": [");
  const std::string dst = WriteFile("dst.json", kDestinations);
  const CommandResult run = Refitctl("plan --src " + bad + " --dst " + dst);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(run.err, bad + ": malformed JSON")) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

TEST(RefitctlTest, UncoveredBoxNamesTensorRankAndBox) {
  std::string partial = kSources;
  partial.replace(partial.find("\"offset\": [512, 0], \"extent\": [512, 4096]"),
                  std::string("\"offset\": [512, 0], \"extent\": [512, 4096]").size(),
                  "\"offset\": [512, 0], \"extent\": [500, 4096]");
  const std::string src = WriteFile("partial.json", partial);
  const std::string dst = WriteFile("dst.json", kDestinations);
  const CommandResult run = Refitctl("plan --src " + src + " --dst " + dst);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "refitctl plan: w: destination rank 0 box [0:1024, 0:2048] is not covered by any "
            "source (uncovered part [1012:1024, 0:2048])\n");
}

TEST(RefitctlTest, BadFlagsExitTwo) {
  EXPECT_EQ(Refitctl("plan --refit mini --verify=everything").exit_code, 2);
  EXPECT_EQ(Refitctl("plan --refit nope").exit_code, 2);
  EXPECT_EQ(Refitctl("plan --src a.json").exit_code, 2);
  EXPECT_EQ(Refitctl("plan --model dsv3-mini --src-parallel pp=2 --dst-parallel tq=2").exit_code,
            2);
  EXPECT_EQ(Refitctl("launch").exit_code, 2);
}

TEST(RefitctlTest, ALiveCommandNamesTheFlagItDoesNotKnow) {
  for (const char* command : {"status", "refit --version=1", "layouts"}) {
    SCOPED_TRACE(command);
    const CommandResult run =
        Refitctl(std::string(command) + " --coordinator=127.0.0.1:9 --colour");
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(absl::StrContains(run.err, "unknown flag --colour")) << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, "usage: refitctl ")) << run.err;
  }
  const CommandResult missing = Refitctl("status");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(absl::StartsWith(missing.err, "usage: refitctl status")) << missing.err;
}

}  // namespace
