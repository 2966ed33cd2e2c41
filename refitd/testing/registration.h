// The registration request of one rank of a layout, as a rank's process sends it: its
// layout and every tensor of the layout declared.
#ifndef REFIT_REFITD_TESTING_REGISTRATION_H_
#define REFIT_REFITD_TESTING_REGISTRATION_H_

#include "proto/refit.pb.h"

namespace refit::daemon::testing {

inline v1::RegisterRankRequest RegistrationOf(v1::Role role, const v1::RankLayout& rank,
                                              const v1::LayoutSpec& spec) {
  v1::RegisterRankRequest request;
  request.set_role(role);
  *request.mutable_layout() = rank;
  *request.mutable_tensors() = spec.tensors();
  return request;
}

}  // namespace refit::daemon::testing

#endif  // REFIT_REFITD_TESTING_REGISTRATION_H_
