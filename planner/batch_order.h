// The transfers of a plan in batch order, which the cost model and the executors walk.
#ifndef REFIT_PLANNER_BATCH_ORDER_H_
#define REFIT_PLANNER_BATCH_ORDER_H_

#include <cstdint>
#include <new>
#include <type_traits>
#include <vector>

#include "planner/plan.h"

namespace refit::planner {

// Orders the transfers by batch, keeping their order within each batch. A plan already in
// batch order is left as it is.
void SortByBatch(Plan* plan);

// Transfers collected by batch as they are made (their batch known), then handed over as
// one list in batch order, each batch's in the order added: what SortByBatch gives for the
// same transfers, without a second copy of the list. Each batch grows in blocks mapped
// from the kernel (pages count only once written), and each block goes back to the kernel
// as soon as it is copied out, so the process holds the list about once.
class TransfersByBatch {
 public:
  TransfersByBatch() = default;
  TransfersByBatch(const TransfersByBatch&) = delete;
  TransfersByBatch& operator=(const TransfersByBatch&) = delete;

  void Add(const Transfer& transfer);
  int32_t num_batches() const { return static_cast<int32_t>(batches_.size()); }
  int64_t size() const { return size_; }
  // Moves every transfer into `out` (replacing what it held) and leaves this empty.
  void MoveTo(std::vector<Transfer>* out);

 private:
  // Anonymous memory for kTransfers transfers, unmapped when destroyed.
  class Block {
   public:
    static constexpr size_t kTransfers = size_t{1} << 18;  // 9 MiB of address space
    Block();
    ~Block();
    Block(Block&& other) noexcept;
    Block& operator=(Block&&) = delete;
    bool full() const { return size_ == kTransfers; }
    void Add(const Transfer& transfer) { new (data_ + size_++) Transfer(transfer); }
    const Transfer* begin() const { return data_; }
    const Transfer* end() const { return data_ + size_; }

   private:
    static_assert(std::is_trivially_copyable_v<Transfer> &&
                      std::is_trivially_destructible_v<Transfer>,
                  "blocks copy transfers in and unmap them without destroying each");
    Transfer* data_;
    size_t size_ = 0;
  };
  std::vector<std::vector<Block>> batches_;  // per batch, its blocks (only the last not full)
  int64_t size_ = 0;
};

}  // namespace refit::planner

#endif  // REFIT_PLANNER_BATCH_ORDER_H_
