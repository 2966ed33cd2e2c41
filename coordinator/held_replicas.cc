#include "coordinator/held_replicas.h"

#include <string>
#include <utility>

namespace refit::daemon {
namespace {

// A destination rank's answer: accepted, or held saying why (`why` non-null).
v1::RegistrationAnswer AnswerFor(int64_t rank, uint64_t registration, const absl::Status* why) {
  v1::RegistrationAnswer answer;
  answer.set_role(v1::ROLE_DESTINATION);
  answer.set_rank(rank);
  answer.set_registration_id(registration);
  answer.set_accepted(true);
  if (why != nullptr) {
    answer.set_held(true);
    answer.set_code(static_cast<int32_t>(why->code()));
    answer.set_refusal(std::string(why->message()));
  }
  return answer;
}

}  // namespace

std::map<int64_t, HeldReplicas::Held> HeldReplicas::FromVetting(
    const ReplicaVetting& vetting, const DestinationReplicas& replicas,
    const std::map<int64_t, uint64_t>& registrations) {
  std::map<int64_t, Held> held;
  for (const auto& [replica, why] : vetting.held) {
    Held& entry = held[replica];
    entry.why = why;
    for (int64_t rank : replicas.RanksOf({replica})) {
      auto it = registrations.find(rank);
      if (it != registrations.end()) entry.registrations[rank] = it->second;
    }
  }
  return held;
}

std::vector<v1::RegistrationAnswer> HeldReplicas::Update(
    std::map<int64_t, Held> now, const std::map<int64_t, uint64_t>& registrations,
    std::vector<int64_t>* newly_held) {
  std::vector<v1::RegistrationAnswer> answers;
  newly_held->clear();
  for (const auto& [replica, held] : now) {
    auto was = held_.find(replica);
    if (was != held_.end() && was->second.registrations == held.registrations &&
        was->second.why == held.why) {
      continue;
    }
    newly_held->push_back(replica);
    for (const auto& [rank, registration] : held.registrations) {
      answers.push_back(AnswerFor(rank, registration, &held.why));
    }
  }
  for (const auto& [replica, held] : held_) {
    if (now.count(replica)) continue;
    for (const auto& [rank, registration] : held.registrations) {
      auto it = registrations.find(rank);
      if (it != registrations.end() && it->second == registration) {
        answers.push_back(AnswerFor(rank, registration, nullptr));
      }
    }
  }
  held_ = std::move(now);
  return answers;
}

void HeldReplicas::Exclude(const DestinationReplicas& replicas,
                           const std::map<int64_t, uint64_t>& registrations,
                           ReplicaCensus* census) const {
  std::vector<int64_t> fit;
  for (int64_t replica : census->complete) {
    auto held = held_.find(replica);
    // Held while its ranks hold the registrations it was held for.
    if (held != held_.end() &&
        replicas.Lacking({replica}, held->second.registrations, registrations).empty()) {
      census->held[replica] = std::string(held->second.why.message());
    } else {
      fit.push_back(replica);
    }
  }
  census->complete = std::move(fit);
}

}  // namespace refit::daemon
