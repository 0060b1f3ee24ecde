// Collectives: what the workers of a job do together (sums, gathers, broadcasts, barriers). Gloo
// implements them between CPU workers (worker/gloo_allreducer.h), NCCL between GPU workers; a
// single-process trainer passes none. Transport-free so the trainer does not know which one it
// has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dlrm::worker {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data[i] = sum over ranks of data[i]. `data` is host memory. Every rank calls it
  // with the same count in the same order. UNAVAILABLE / DEADLINE_EXCEEDED when a peer is gone.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
  // The same for bf16 values (their raw 16 bits), for gradients sent in half the bytes: each sum
  // is made in fp32 and rounded to nearest even, and every rank ends with the same bits. The
  // base class widens to floats, calls AllReduceSum (fp32 on the wire) and rounds once; Gloo
  // sends the 2-byte values and rounds after each addition (once for two ranks).
  virtual absl::Status AllReduceSumBf16(uint16_t* data, size_t count);

  // out = the pieces of every rank, in rank order: rank r contributes counts[r] elements (this
  // rank's are `in`, counts[rank()] of them), and every rank passes the same `counts`. `out`
  // holds sum(counts) elements. Host memory. The base class builds it from AllReduceSum (every
  // rank fills its own range and zeros elsewhere), which moves world times the bytes; Gloo sends
  // each piece to each other rank once.
  virtual absl::Status AllGatherV(const float* in, const std::vector<size_t>& counts, float* out);
  // The same for integers. The base class carries them as floats: INVALID_ARGUMENT for a value
  // beyond +-2^24, which a float would not hold exactly.
  virtual absl::Status AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
                                  int32_t* out);

  // Bytes this rank has sent in its collectives since it was made. Computed from the payload of
  // each call and the algorithm that moves it (a ring allreduce sends 2 (world - 1) / world of
  // the buffer, a ring allgather every piece but its right neighbour's, a direct exchange the
  // rank's own payload to each of the world - 1 others), not read from a
  // socket; 0 where the implementation does not count. Compare with the kernel's TCP counts
  // (common/rpc_bytes.h OpenTcpSocketBytes) for what the transport adds.
  virtual int64_t sent_bytes() const { return 0; }
};

// Rank 0's `bytes` on every rank (other ranks pass anything; it is ignored): an allgather of its
// length, then of the bytes, three to an integer so that every implementation carries them
// exactly. For data too large for the coordinator's key-value store (e.g. a hot set).
absl::StatusOr<std::string> BroadcastFromRankZero(Collectives* reducer, const std::string& bytes);

// What the ring algorithms send from one rank, by the payload (see sent_bytes above).
int64_t RingAllReduceSentBytes(int64_t bytes, int world_size);
int64_t RingAllGatherSentBytes(const std::vector<size_t>& counts, size_t element_bytes, int rank);

}  // namespace dlrm::worker
