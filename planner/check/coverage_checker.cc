#include "planner/check/coverage_checker.h"

#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/check/region_math.h"

namespace refit::check {
namespace {

using planner::EndpointKind;

struct Written {
  Region region;
  int32_t batch;
};

class CoverageChecker {
 public:
  CoverageChecker(const planner::Layout& sources, const planner::Layout& destinations,
                  const planner::Plan& plan)
      : src_(sources), dst_(destinations), plan_(plan), view_writes_(destinations.views.size()) {}

  absl::Status Run() {
    int32_t last_batch = 0;
    for (const planner::Transfer& t : plan_.transfers) {
      if (t.batch < last_batch) return Fail("transfers are not in batch order", t, nullptr);
      last_batch = t.batch;
      absl::Status s = CheckTransfer(t);
      if (!s.ok()) return s;
    }
    for (int32_t v = 0; v < static_cast<int32_t>(dst_.views.size()); ++v) {
      absl::Status s = CheckExactlyOnce(v);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Fail(const std::string& what, const planner::Transfer& t, const Region* box) {
    const planner::Piece& piece = plan_.pieces[t.piece];
    const std::string tensor =
        piece.tensor >= 0 && piece.tensor < static_cast<int32_t>(dst_.tensors.size())
            ? dst_.tensors[piece.tensor].name
            : "?";
    return absl::FailedPreconditionError(absl::StrCat(tensor, ": transfer to ", RankName(t.dst),
                                                      " box ", box ? Describe(*box) : "?",
                                                      " in batch ", t.batch, ": ", what));
  }

  std::string RankName(const planner::Endpoint& e) const {
    const planner::Layout& side = e.IsSourceSide() ? src_ : dst_;
    if (e.rank_index < 0 || e.rank_index >= static_cast<int32_t>(side.ranks.size())) {
      return "an unknown rank";
    }
    return absl::StrCat(side.side, " rank ", side.ranks[e.rank_index].rank);
  }

  // The view of a view endpoint, after checking it belongs to the endpoint's rank and holds
  // the same tensor; nullptr when it does not.
  const planner::ViewInfo* ViewOf(const planner::Endpoint& e, int32_t tensor) const {
    const planner::Layout& side = e.IsSourceSide() ? src_ : dst_;
    if (e.index < 0 || e.index >= static_cast<int32_t>(side.views.size())) return nullptr;
    const planner::ViewInfo& view = side.views[e.index];
    if (view.rank_index != e.rank_index) return nullptr;
    if (side.tensors[view.tensor].name != dst_.tensors[tensor].name) return nullptr;
    return &view;
  }

  // The writes of a scratch or relay buffer endpoint that `box` of `tensor` may use;
  // nullptr when the buffer holds another tensor, or (relay buffers) not the whole box.
  std::vector<Written>* ScratchOf(const planner::Endpoint& e, int32_t tensor, const Region& box) {
    if (e.kind == EndpointKind::kRelayBuffer) {
      if (e.index < 0 || e.index >= static_cast<int32_t>(plan_.pieces.size())) return nullptr;
      const planner::Piece& held = plan_.pieces[e.index];
      if (held.tensor != tensor ||
          !IsInside(box,
                    RegionFrom(held.box.offset.data(), held.box.extent.data(), held.box.rank()))) {
        return nullptr;
      }
    } else if (e.index != tensor) {
      return nullptr;
    }
    return &scratch_writes_[std::make_tuple(e.kind, e.rank_index, e.index)];
  }

  bool ArrivedBefore(const Region& box, const std::vector<Written>& writes, int32_t batch) {
    std::vector<Region> ready;
    for (const Written& w : writes) {
      if (w.batch < batch || plan_.ordered_batches) ready.push_back(w.region);
    }
    return IsCoveredBy(box, ready);
  }

  absl::Status CheckTransfer(const planner::Transfer& t) {
    if (t.piece < 0 || t.piece >= static_cast<int32_t>(plan_.pieces.size())) {
      return Fail("refers to a piece that does not exist", t, nullptr);
    }
    const planner::Piece& piece = plan_.pieces[t.piece];
    const planner::TensorInfo& tensor = dst_.tensors[piece.tensor];
    const Region box =
        RegionFrom(piece.box.offset.data(), piece.box.extent.data(), piece.box.rank());
    Region whole;
    whole.lo.assign(tensor.shape.size(), 0);
    whole.hi.assign(tensor.shape.begin(), tensor.shape.end());
    if (!IsInside(box, whole)) return Fail("box lies outside the tensor", t, &box);
    if (piece.bytes != Cells(box) * tensor.element_bytes) {
      return Fail("its piece's byte count does not match the box", t, &box);
    }
    // Read side.
    switch (t.src.kind) {
      case EndpointKind::kSourceView:
      case EndpointKind::kDestinationView: {
        const planner::ViewInfo* view = ViewOf(t.src, piece.tensor);
        if (view == nullptr) return Fail("reads a view of another rank or tensor", t, &box);
        const Region held =
            RegionFrom(view->box.offset.data(), view->box.extent.data(), view->box.rank());
        if (!IsInside(box, held)) {
          return Fail(absl::StrCat("reads outside its source view ", Describe(held), " on ",
                                   RankName(t.src)),
                      t, &box);
        }
        if (t.src.kind == EndpointKind::kDestinationView &&
            dst_.ranks[view->rank_index].bucketed) {
          return Fail(absl::StrCat("forwards from ", RankName(t.src),
                                   ", which is bucketed (nothing keeps its bytes)"),
                      t, &box);
        }
        if (t.src.kind == EndpointKind::kDestinationView &&
            !ArrivedBefore(box, view_writes_[t.src.index], t.batch)) {
          return Fail(absl::StrCat("forwards from ", RankName(t.src), " before the data arrived"),
                      t, &box);
        }
        break;
      }
      default: {
        std::vector<Written>* writes = ScratchOf(t.src, piece.tensor, box);
        if (writes == nullptr) {
          return Fail(absl::StrCat("reads a buffer of ", RankName(t.src), " that does not hold it"),
                      t, &box);
        }
        if (!ArrivedBefore(box, *writes, t.batch)) {
          return Fail(absl::StrCat("reads a buffer of ", RankName(t.src), " before it is filled"),
                      t, &box);
        }
      }
    }
    // Write side.
    if (t.dst.kind == EndpointKind::kDestinationView) {
      const planner::ViewInfo* view = ViewOf(t.dst, piece.tensor);
      if (view == nullptr) return Fail("writes a view of another rank or tensor", t, &box);
      const Region held =
          RegionFrom(view->box.offset.data(), view->box.extent.data(), view->box.rank());
      if (!IsInside(box, held)) {
        return Fail(absl::StrCat("writes outside its destination view ", Describe(held)), t, &box);
      }
      view_writes_[t.dst.index].push_back(Written{box, t.batch});
    } else if (t.dst.kind == EndpointKind::kSourceView) {
      return Fail("writes into a source view", t, &box);
    } else {
      std::vector<Written>* writes = ScratchOf(t.dst, piece.tensor, box);
      if (writes == nullptr) {
        return Fail(absl::StrCat("writes a buffer of ", RankName(t.dst), " that does not hold it"),
                    t, &box);
      }
      if (t.dst.kind == EndpointKind::kRelayBuffer) {
        for (const Written& w : *writes) {
          if (!AreDisjoint(w.region, box)) {
            return Fail(absl::StrCat("fills a relay buffer of ", RankName(t.dst), " twice"), t,
                        &box);
          }
        }
      }
      writes->push_back(Written{box, t.batch});
    }
    return absl::OkStatus();
  }

  absl::Status CheckExactlyOnce(int32_t v) {
    const planner::ViewInfo& view = dst_.views[v];
    const std::vector<Written>& writes = view_writes_[v];
    const Region held = RegionFrom(view.box.offset.data(), view.box.extent.data(), view.box.rank());
    const std::string where =
        absl::StrCat(dst_.tensors[view.tensor].name, ": destination rank ",
                     dst_.ranks[view.rank_index].rank, " box ", Describe(held));
    int64_t cells = 0;
    for (size_t i = 0; i < writes.size(); ++i) {
      cells += Cells(writes[i].region);
      for (size_t j = i + 1; j < writes.size(); ++j) {
        if (!AreDisjoint(writes[i].region, writes[j].region)) {
          return absl::FailedPreconditionError(absl::StrCat(where, ": ", Describe(writes[i].region),
                                                            " and ", Describe(writes[j].region),
                                                            " are both written (twice)"));
        }
      }
    }
    if (cells != Cells(held)) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": ", cells, " of ", Cells(held), " elements are written"));
    }
    return absl::OkStatus();
  }

  const planner::Layout& src_;
  const planner::Layout& dst_;
  const planner::Plan& plan_;
  std::vector<std::vector<Written>> view_writes_;
  std::map<std::tuple<EndpointKind, int32_t, int32_t>, std::vector<Written>> scratch_writes_;
};

}  // namespace

absl::Status CheckCoverage(const planner::Layout& sources, const planner::Layout& destinations,
                           const planner::Plan& plan) {
  return CoverageChecker(sources, destinations, plan).Run();
}

}  // namespace refit::check
