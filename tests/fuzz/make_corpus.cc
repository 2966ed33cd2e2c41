// Writes the fuzzers' seed corpus from the planner's test matrix, random layout pairs and
// the builtin models: make_corpus OUT_DIR (one folder per fuzz target).
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/builtin_models.h"
#include "planner/testing/layout_builder.h"
#include "planner/testing/matrix_cases.h"
#include "proto/refit.pb.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  for (const char* dir : {"", "/layout_fuzzer", "/model_fuzzer", "/registration_fuzzer"}) {
    mkdir((out + dir).c_str(), 0755);
  }
  int n = 0;
  auto add_pair = [&](const refit::v1::LayoutSpec& sources,
                      const refit::v1::LayoutSpec& destinations) {
    refit::v1::LayoutsResponse layouts;
    *layouts.mutable_sources() = sources;
    *layouts.mutable_destinations() = destinations;
    Write(absl::StrCat(out, "/layout_fuzzer/seed-", n), layouts.SerializeAsString());
    // One registration per side: the first rank, with a buffer per view.
    for (auto [spec, role] : {std::pair{&sources, refit::v1::ROLE_SOURCE},
                              std::pair{&destinations, refit::v1::ROLE_DESTINATION}}) {
      if (spec->ranks_size() == 0) continue;
      refit::v1::RegisterRankRequest request;
      request.set_role(role);
      *request.mutable_layout() = spec->ranks(0);
      *request.mutable_tensors() = spec->tensors();
      Write(absl::StrCat(out, "/registration_fuzzer/seed-", n, "-", role),
            request.SerializeAsString());
    }
    ++n;
  };
  for (const refit::testing::MatrixCase& c : refit::testing::MatrixCases()) {
    refit::testing::LayoutBuilder src, dst;
    c.build(&src, &dst);
    add_pair(src.spec(), dst.spec());
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 32; ++i) {
    refit::testing::RandomLayoutOptions options;
    options.max_ranks = 6;
    const refit::testing::LayoutPair pair = refit::testing::RandomLayoutPair(rng, options);
    add_pair(pair.sources, pair.destinations);
  }
  for (const refit::planner::BuiltinModel& model : refit::planner::BuiltinModels()) {
    Write(out + "/model_fuzzer/" + model.name, "pp=2,ep=2\ntp=2,dp=2\n" + model.json);
    Write(out + "/model_fuzzer/" + model.name + "-tp4", "pp=1,ep=4,tp=2\ntp=4,dp=1\n" + model.json);
  }
  std::printf("seeds: %d layout pairs and their registrations, %zu models in %s\n", n,
              2 * refit::planner::BuiltinModels().size(), out.c_str());
  return 0;
}
