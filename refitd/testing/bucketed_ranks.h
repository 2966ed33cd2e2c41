#ifndef REFIT_REFITD_TESTING_BUCKETED_RANKS_H_
#define REFIT_REFITD_TESTING_BUCKETED_RANKS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/refit.pb.h"
#include "refitd/rank_registry.h"
#include "transport/shared_memory.h"
#include "transport/testing/backed_layouts.h"

namespace refit::daemon::testing {

// A test's stand-in for processes that take their weights in buckets (RankLayout.bucketed).
// Test-only (gtest expectations inside).
// The destination ranks of `destinations`, registered with `registry` already, registered
// again bucketed: their views keep their boxes and lose their memory, and each rank's one
// buffer is a `bucket_bytes` bucket. The processes are stood for by threads serving each
// rank's bucket stream: `take` sees every bucket and returns what BucketDone says (empty:
// taken).
class BucketedRanks {
 public:
  using Take =
      std::function<std::string(int64_t rank, const v1::Bucket& bucket, const uint8_t* memory)>;

  BucketedRanks(RankRegistry* registry, const v1::LayoutSpec& destinations, int64_t bucket_bytes)
      : registry_(registry) {
    for (v1::RankLayout r : destinations.ranks()) {
      EXPECT_TRUE(registry->Deregister(v1::ROLE_DESTINATION, r.rank()).ok());
      r.set_bucketed(true);
      r.clear_buffers();
      for (v1::ShardView& v : *r.mutable_views()) {
        v.clear_buffer();
        v.clear_byte_offset();
        v.clear_strides();
      }
      const std::string name = transport::testing::UniqueShmName("bucket");
      auto bucket = transport::SharedMemorySegment::Create(name, bucket_bytes);
      EXPECT_TRUE(bucket.ok()) << bucket.status();
      v1::BufferSpec* spec = r.add_buffers();
      spec->set_name("bucket");
      spec->set_bytes(bucket_bytes);
      spec->set_shm_name(name);
      memory_[r.rank()] = (*bucket)->data();
      buckets_.push_back(std::move(*bucket));
      v1::RegisterRankRequest request;
      request.set_role(v1::ROLE_DESTINATION);
      *request.mutable_layout() = r;
      *request.mutable_tensors() = destinations.tensors();
      absl::StatusOr<std::string> session = registry->Register(request);
      EXPECT_TRUE(session.ok()) << session.status();
      sessions_[r.rank()] = session.ok() ? *session : "";
      layouts_.push_back(r);
    }
  }

  // Opens every rank's stream (returns once each is attached).
  void Attach(Take take) {
    take_ = std::move(take);
    for (const auto& [rank, session] : sessions_) {
      auto attached = std::make_shared<std::atomic<bool>>(false);
      threads_.emplace_back([this, rank = rank, session = session, attached] {
        registry_->bucket_streams().Serve(
            rank, session,
            [&](const v1::Bucket& bucket) {
              if (bucket.sequence() == 0) {
                *attached = true;
                return true;
              }
              const std::string error = take_(rank, bucket, memory_.at(rank));
              return registry_->bucket_streams()
                  .Done(rank, session, bucket.epoch_id(), bucket.sequence(), error)
                  .ok();
            },
            [this] { return stop_.load(); });
      });
      for (int i = 0; i < 500 && !*attached; ++i) absl::SleepFor(absl::Milliseconds(2));
      EXPECT_TRUE(*attached) << "destination rank " << rank;
    }
  }

  ~BucketedRanks() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }

  const std::vector<v1::RankLayout>& layouts() const { return layouts_; }

 private:
  RankRegistry* registry_;
  std::vector<std::unique_ptr<transport::SharedMemorySegment>> buckets_;
  std::map<int64_t, uint8_t*> memory_;
  std::map<int64_t, std::string> sessions_;
  std::vector<v1::RankLayout> layouts_;
  Take take_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace refit::daemon::testing

#endif  // REFIT_REFITD_TESTING_BUCKETED_RANKS_H_
