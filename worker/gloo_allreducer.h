// GlooAllReducer: the Collectives between CPU workers, over Gloo's TCP transport. The ranks
// of a job find each other through the coordinator's rendezvous key-value store
// (worker/kv_rendezvous_store.h) under a job-scoped prefix, then connect a full mesh. Every rank
// ends each collective with the same (bitwise) result.
//
// Two algorithms, chosen by size (the same choice on every rank, since every rank passes the same
// count):
//  - Direct exchange, for payloads up to direct_max_bytes (and, for an allreduce among more than
//    two ranks, up to kDirectAllReduceWideMaxBytes): every rank sends its whole payload to every
//    other rank in one message and sums (or places) what it receives in rank order. Each rank
//    keeps two receives posted per peer, used in turn, so a message leaves the moment it is sent:
//    one one-way network delay per collective. (A Gloo send to a peer without a posted receive
//    first waits for that peer's ready notice, so each step of Gloo's ring costs a round trip,
//    and its allreduce two steps at least: four one-way delays.) This is the "one-shot"
//    allreduce that NCCL-based stacks use for small messages. With two ranks it sends the same
//    bytes as the ring.
//  - Gloo's ring allreduce and ring allgatherv for anything larger: they send 2 (n - 1) / n of
//    the buffer per rank, the least bandwidth, at (n - 1) round trips per phase.
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
#include <optional>
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
class UnboundBuffer;
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
  // Largest payload (bytes a rank contributes) sent by direct exchange; every rank of a job must
  // pass the same value. Each rank holds two receive buffers of this size per peer. Unset:
  // DefaultDirectMaxBytes(world_size). 0: Gloo's ring for every collective.
  std::optional<size_t> direct_max_bytes;
};

// 4 MiB with two ranks (a dense bucket's most, DenseGradientSync::kMaxBucketBytes), then
// 8 MiB / (world - 1) down to 256 KiB, so that the receive buffers stay near 16 MiB a rank.
size_t DefaultDirectMaxBytes(int world_size);

class GlooAllReducer : public Collectives {
 public:
  // An allreduce among more than two ranks goes direct only up to this size: beyond it the
  // ring's fewer bytes (2 (n - 1) / n of the buffer, against n - 1 buffers) outweigh its delays.
  static constexpr size_t kDirectAllReduceWideMaxBytes = 256 << 10;

  // Rendezvous and full-mesh connect; blocks until every rank has joined or the timeout.
  static absl::StatusOr<std::unique_ptr<GlooAllReducer>> Create(
      const GlooAllReducerOptions& options);
  ~GlooAllReducer() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(float* data, size_t count) override;
  // 2 bytes a value on the wire (see Collectives).
  absl::Status AllReduceSumBf16(uint16_t* data, size_t count) override;
  // Each piece once to every other rank: directly, or around Gloo's ring.
  absl::Status AllGatherV(const float* in, const std::vector<size_t>& counts, float* out) override;
  absl::Status AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
                          int32_t* out) override;
  int64_t sent_bytes() const override { return sent_bytes_; }
  // Collectives so far that went by direct exchange, and by Gloo's ring.
  int64_t direct_calls() const { return direct_calls_; }
  int64_t ring_calls() const { return ring_calls_; }
  size_t direct_max_bytes() const { return direct_max_bytes_; }
  // All ranks wait until every rank has called it (an allreduce of one float).
  absl::Status Barrier();
  // Ends a direct-exchange collective in flight, and fails every later collective, UNAVAILABLE
  // with `why`: for a run that is stopping, whose peer may be stopped rather than dead (a stopped
  // process keeps its sockets open, so a collective with it would wait out the op timeout).
  // A collective around Gloo's ring (a payload above direct_max_bytes) cannot be reached from
  // outside and still ends at its op timeout. Thread-safe; from any thread while the reducer lives.
  void Abort(const std::string& why);

 private:
  GlooAllReducer(int rank, int world_size, absl::Duration op_timeout);
  using ReduceFn = void (*)(void*, const void*, const void*, size_t);
  // The allreduce of count values of T in place, with `reduce` as its sum, by direct exchange or
  // Gloo's ring; `values` names them in errors.
  template <typename T>
  absl::Status AllReduce(T* data, size_t count, ReduceFn reduce, const char* values);
  absl::Status GatherBytes(const void* in, const std::vector<size_t>& counts, size_t element_bytes,
                           void* out);
  // Posts the receive buffers of the direct exchange (two per peer) once connected.
  void PostDirectReceives();
  // Sends `bytes` at `data` to every peer, then calls take(peer rank, its bytes) for each peer in
  // rank order as they arrive, reposting each buffer after its take. Throws Gloo's exceptions.
  template <typename Take>
  void DirectExchange(const void* data, size_t bytes, Take take);
  // Throw, for AllReduce's catch, the reason Abort gave: when it was called, and at once.
  void ThrowIfAborted();
  [[noreturn]] void ThrowAborted();
  // The receive buffer of peer rank p for the current direct call.
  size_t DirectIndex(int peer) const;

  int rank_;
  int world_size_;
  absl::Duration op_timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  bool broken_ = false;
  int64_t sent_bytes_ = 0;
  int64_t direct_calls_ = 0;
  int64_t ring_calls_ = 0;
  // Direct exchange: two receive buffers per peer (index 2 * (peer - (peer > rank)) + parity),
  // each of direct_max_bytes_, with a receive always posted; own_ holds this rank's payload when
  // a sum must not overwrite it before its turn (ranks >= 2).
  size_t direct_max_bytes_ = 0;
  std::vector<std::unique_ptr<char[]>> direct_memory_;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> direct_recv_;
  std::vector<char> own_;
  // Abort: the reason (set once), and the send buffer of the direct exchange in flight.
  absl::Mutex abort_mu_;
  std::optional<std::string> aborted_ ABSL_GUARDED_BY(abort_mu_);
  gloo::transport::UnboundBuffer* in_flight_send_ ABSL_GUARDED_BY(abort_mu_) = nullptr;
};

}  // namespace dlrm::worker
