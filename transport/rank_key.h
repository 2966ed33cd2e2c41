// Which rank something belongs to: its side of the refit (source or destination) and its
// rank id. The key of every per-rank map in the daemons and the data plane, and the one
// way messages name a rank ("source rank 3").
#ifndef REFIT_TRANSPORT_RANK_KEY_H_
#define REFIT_TRANSPORT_RANK_KEY_H_

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/refit.pb.h"

namespace refit::transport {

// "source rank 3", "destination rank 0".
inline std::string RankName(v1::Role role, int64_t rank) {
  return absl::StrCat(role == v1::ROLE_SOURCE ? "source" : "destination", " rank ", rank);
}

// Whether an endpoint of a transfer lives on a source rank (its views, scratch or relay
// buffers) or a destination rank.
inline v1::Role EndpointRole(v1::EndpointKind kind) {
  return kind == v1::ENDPOINT_SOURCE_VIEW || kind == v1::ENDPOINT_SOURCE_SCRATCH ||
                 kind == v1::ENDPOINT_RELAY_BUFFER
             ? v1::ROLE_SOURCE
             : v1::ROLE_DESTINATION;
}

// Whether an endpoint is one of a source rank's relay buffers.
inline bool IsRelayBufferEndpoint(const v1::Endpoint& e) {
  return e.kind() == v1::ENDPOINT_RELAY_BUFFER;
}

// Whether an endpoint is a rank's view (not scratch or a relay buffer).
inline bool IsViewEndpoint(const v1::Endpoint& e) {
  return e.kind() == v1::ENDPOINT_SOURCE_VIEW || e.kind() == v1::ENDPOINT_DESTINATION_VIEW;
}

struct RankKey {
  v1::Role role = v1::ROLE_UNSPECIFIED;
  int64_t rank = 0;

  std::string Name() const { return RankName(role, rank); }
  friend bool operator<(const RankKey& a, const RankKey& b) {
    return std::tie(a.role, a.rank) < std::tie(b.role, b.rank);
  }
  friend bool operator==(const RankKey& a, const RankKey& b) {
    return a.role == b.role && a.rank == b.rank;
  }
  template <typename H>
  friend H AbslHashValue(H h, const RankKey& key) {
    return H::combine(std::move(h), static_cast<int>(key.role), key.rank);
  }
};

// A set of ranks' views: (role, rank, view index).
using ViewKeySet = std::set<std::tuple<int, int64_t, int32_t>>;

}  // namespace refit::transport

#endif  // REFIT_TRANSPORT_RANK_KEY_H_
