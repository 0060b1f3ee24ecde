// GlooAllReducer: the DenseAllReducer between CPU workers, over Gloo's TCP transport. The ranks
// of a job find each other through the coordinator's rendezvous key-value store
// (worker/kv_rendezvous_store.h) under a job-scoped prefix, then connect a full mesh and sum
// with Gloo's ring allreduce, so every rank ends with the same (bitwise) result.
//
//   DLRM_ASSIGN_OR_RETURN(auto reducer, GlooAllReducer::Create({.client = coordinator.get(),
//       .prefix = "job/j-1/gloo/", .rank = 0, .world_size = 2, .hostname = "10.0.0.5"}));
//   DLRM_RETURN_IF_ERROR(reducer->AllReduceSum(grads.data(), grads.size()));
//
// Gloo throws; this class catches every exception where it enters and answers absl::Status:
// UNAVAILABLE naming the rank when a peer is gone (connection closed or reset), DEADLINE_EXCEEDED
// when the rendezvous or a collective outlasts its timeout. After an error the context is
// broken and every later call fails. Not thread-safe: one thread (the compute stage) calls it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "worker/collective.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace dlrm::worker {

struct GlooAllReducerOptions {
  client::CoordinatorClient* client = nullptr;  // not owned; used only during Create
  std::string prefix;                           // rendezvous key prefix, unique per job run
  int rank = 0;
  int world_size = 1;
  // Address the TCP device binds and advertises to peers; "" = resolve this host's name.
  std::string hostname;
  absl::Duration rendezvous_timeout = absl::Seconds(120);  // waiting for every rank to appear
  absl::Duration op_timeout = absl::Seconds(120);          // one collective, end to end
  // Polled while waiting for the other ranks; true abandons the rendezvous (CANCELLED).
  std::function<bool()> cancelled;
};

class GlooAllReducer : public DenseAllReducer {
 public:
  // Rendezvous and full-mesh connect; blocks until every rank has joined or the timeout.
  static absl::StatusOr<std::unique_ptr<GlooAllReducer>> Create(
      const GlooAllReducerOptions& options);
  ~GlooAllReducer() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  // 2 bytes a value on the wire (see DenseAllReducer).
  absl::Status AllReduceSumBf16(uint16_t* data, size_t count) override;
  // Gloo's ring allgatherv: each piece travels the ring once.
  absl::Status AllGatherV(const float* in, const std::vector<size_t>& counts, float* out) override;
  absl::Status AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
                          int32_t* out) override;
  int64_t sent_bytes() const override { return sent_bytes_; }
  // All ranks wait until every rank has called it (an allreduce of one float).
  absl::Status Barrier();

 private:
  GlooAllReducer(int rank, int world_size, absl::Duration op_timeout);
  using ReduceFn = void (*)(void*, const void*, const void*, size_t);
  // Gloo's ring allreduce of count values of T in place, with `reduce` as its sum; `values`
  // names them in errors.
  template <typename T>
  absl::Status RingAllReduce(T* data, size_t count, ReduceFn reduce, const char* values);
  absl::Status GatherBytes(const void* in, const std::vector<size_t>& counts, size_t element_bytes,
                           void* out);

  int rank_;
  int world_size_;
  absl::Duration op_timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  bool broken_ = false;
  int64_t sent_bytes_ = 0;
};

}  // namespace dlrm::worker
