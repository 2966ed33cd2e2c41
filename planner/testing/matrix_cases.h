// A matrix of named reshards in the spirit of the reference implementation's own tests
// (replication, sharding, 2-D meshes, 3:1, 1:3, 5:7, 3-D, 4-D, cross-dim, tiny pieces,
// fused gate_up, column-major, colocated DP), shared by the planner's and the data
// plane's tests.
#ifndef REFIT_PLANNER_TESTING_MATRIX_CASES_H_
#define REFIT_PLANNER_TESTING_MATRIX_CASES_H_

#include <functional>
#include <string>
#include <vector>

#include "planner/testing/layout_builder.h"

namespace refit::testing {

struct MatrixCase {
  std::string name;
  std::function<void(LayoutBuilder* src, LayoutBuilder* dst)> build;
};

std::vector<MatrixCase> MatrixCases();

}  // namespace refit::testing

#endif  // REFIT_PLANNER_TESTING_MATRIX_CASES_H_
