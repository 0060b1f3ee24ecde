#include "worker/gloo_allreducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <numeric>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "embedding/row_dtype.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "worker/kv_rendezvous_store.h"

namespace dlrm::worker {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Gloo reports a timeout only through the text of its exception.
absl::Status FromGlooException(const std::exception& e, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", e.what());
  if (absl::StrContains(e.what(), "imed out") || absl::StrContains(e.what(), "DEADLINE") ||
      absl::StrContains(e.what(), "imeout")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

// Gloo's reduce function for bf16 values: c = round_to_nearest_even(a + b), the sum in fp32.
// c may be a or b (Gloo reduces in place), so each chunk is read before it is written.
void SumBf16(void* c, const void* a, const void* b, size_t n) {
  constexpr size_t kChunk = 256;
  float fa[kChunk], fb[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const int64_t m = static_cast<int64_t>(std::min(kChunk, n - i));
    embedding::DecodeValues(embedding::RowDtype::kBf16, static_cast<const uint16_t*>(a) + i, m, fa);
    embedding::DecodeValues(embedding::RowDtype::kBf16, static_cast<const uint16_t*>(b) + i, m, fb);
    for (int64_t j = 0; j < m; ++j) fa[j] += fb[j];
    embedding::EncodeValues(embedding::RowDtype::kBf16, fa, m, static_cast<uint16_t*>(c) + i);
  }
}

// The slot of the direct exchange's messages, apart from those of Gloo's own collectives (their
// prefixes are 0x01-0x08).
uint64_t DirectSlot() { return gloo::Slot::build(/*prefix=*/0x44, 0); }

}  // namespace

size_t DefaultDirectMaxBytes(int world_size) {
  if (world_size <= 2) return 4 << 20;
  return std::max<size_t>(256 << 10, (size_t{8} << 20) / static_cast<size_t>(world_size - 1));
}

GlooAllReducer::GlooAllReducer(int rank, int world_size, absl::Duration op_timeout)
    : rank_(rank), world_size_(world_size), op_timeout_(op_timeout) {}

GlooAllReducer::~GlooAllReducer() = default;

void GlooAllReducer::Abort(const std::string& why) {
  absl::MutexLock lock(&abort_mu_);
  if (aborted_.has_value()) return;
  aborted_ = why;
  // Each wakes the wait on it now, or makes the next one return at once.
  for (auto& recv : direct_recv_) recv->abortWaitRecv();
  if (in_flight_send_ != nullptr) in_flight_send_->abortWaitSend();
}

void GlooAllReducer::ThrowIfAborted() {
  absl::MutexLock lock(&abort_mu_);
  if (aborted_.has_value()) throw std::runtime_error(*aborted_);
}

void GlooAllReducer::ThrowAborted() {
  ThrowIfAborted();
  throw std::runtime_error("direct exchange: a wait was aborted");
}

absl::StatusOr<std::unique_ptr<GlooAllReducer>> GlooAllReducer::Create(
    const GlooAllReducerOptions& options) {
  if (options.client == nullptr) return absl::InvalidArgumentError("gloo: no coordinator client");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo: rank ", options.rank, " out of range for world size ", options.world_size));
  }
  auto reducer = std::unique_ptr<GlooAllReducer>(
      new GlooAllReducer(options.rank, options.world_size, options.op_timeout));
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    reducer->device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(ToChrono(options.rendezvous_timeout));
    KvRendezvousStore store({.client = options.client,
                             .prefix = options.prefix,
                             .timeout = options.rendezvous_timeout,
                             .cancelled = options.cancelled});
    context->connectFullMesh(store, reducer->device_);
    context->setTimeout(ToChrono(options.op_timeout));
    reducer->context_ = std::move(context);
  } catch (const std::exception& e) {
    if (options.cancelled && options.cancelled()) {
      return absl::CancelledError(absl::StrCat("gloo rendezvous of rank ", options.rank, " under '",
                                               options.prefix, "' cancelled"));
    }
    return FromGlooException(e, absl::StrCat("gloo rendezvous of rank ", options.rank, "/",
                                             options.world_size, " under '", options.prefix, "'"));
  }
  if (options.world_size > 1) {
    // Every rank must take the same path for a given size, or a collective would wait for
    // messages that never come: the limits are compared once, around the ring.
    const size_t limit =
        options.direct_max_bytes.value_or(DefaultDirectMaxBytes(options.world_size));
    const uint64_t wide = limit;
    const int32_t mine[2] = {static_cast<int32_t>(wide & 0xffffffffu),
                             static_cast<int32_t>(wide >> 32)};
    std::vector<int32_t> all(2 * static_cast<size_t>(options.world_size));
    DLRM_RETURN_IF_ERROR(
        reducer->AllGatherV(mine, std::vector<size_t>(options.world_size, 2), all.data()));
    for (int r = 0; r < options.world_size; ++r) {
      const uint64_t theirs = static_cast<uint32_t>(all[2 * r]) |
                              (static_cast<uint64_t>(static_cast<uint32_t>(all[2 * r + 1])) << 32);
      if (theirs != wide) {
        return absl::FailedPreconditionError(absl::StrCat(
            "gloo under '", options.prefix, "': rank ", r, " sends collectives of up to ", theirs,
            " bytes by direct exchange and rank ", options.rank, " up to ", limit,
            "; every worker of a job must agree (--ring-collectives on some workers only?)"));
      }
    }
    // Part of connecting, as the rendezvous is: the counters start after it.
    reducer->ring_calls_ = 0;
    reducer->sent_bytes_ = 0;
    reducer->direct_max_bytes_ = limit;
    try {
      reducer->PostDirectReceives();
    } catch (const std::exception& e) {
      return FromGlooException(e, absl::StrCat("gloo: rank ", options.rank, " posting receives"));
    }
  }
  DLRM_LOG(INFO) << "gloo: rank " << options.rank << "/" << options.world_size
                 << " connected (prefix " << options.prefix << ")";
  return reducer;
}

void GlooAllReducer::PostDirectReceives() {
  if (direct_max_bytes_ == 0) return;
  const uint64_t slot = DirectSlot();
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    for (int parity = 0; parity < 2; ++parity) {
      direct_memory_.push_back(std::unique_ptr<char[]>(new char[direct_max_bytes_]));
      direct_recv_.push_back(
          context_->createUnboundBuffer(direct_memory_.back().get(), direct_max_bytes_));
      direct_recv_.back()->recv(peer, slot, 0, direct_max_bytes_);
    }
  }
}

size_t GlooAllReducer::DirectIndex(int peer) const {
  const int index = peer - (peer > rank_ ? 1 : 0);
  return 2 * static_cast<size_t>(index) + static_cast<size_t>(direct_calls_ % 2);
}

template <typename Take>
void GlooAllReducer::DirectExchange(const void* data, size_t bytes, Take take) {
  const uint64_t slot = DirectSlot();
  const auto timeout = ToChrono(op_timeout_);
  // Gloo only reads the payload: the cast is for its buffer type.
  auto send = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
  ThrowIfAborted();
  {
    absl::MutexLock lock(&abort_mu_);
    in_flight_send_ = send.get();
  }
  struct Forget {  // the send buffer goes when this returns or throws
    GlooAllReducer* self;
    ~Forget() {
      absl::MutexLock lock(&self->abort_mu_);
      self->in_flight_send_ = nullptr;
    }
  } forget{this};
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer != rank_) send->send(peer, slot, 0, bytes);
  }
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    gloo::transport::UnboundBuffer* recv = direct_recv_[DirectIndex(peer)].get();
    if (!recv->waitRecv(timeout)) ThrowAborted();
    take(peer, static_cast<const char*>(recv->ptr));
  }
  // The payload may be overwritten once every send has left it.
  for (int i = 0; i < world_size_ - 1; ++i) {
    if (!send->waitSend(timeout)) ThrowAborted();
  }
  // Each buffer takes the message of the call after next: the peer's next one goes to the other.
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer != rank_) direct_recv_[DirectIndex(peer)]->recv(peer, slot, 0, direct_max_bytes_);
  }
  ++direct_calls_;
  sent_bytes_ += static_cast<int64_t>(bytes) * (world_size_ - 1);
}

template <typename T>
absl::Status GlooAllReducer::AllReduce(T* data, size_t count, ReduceFn reduce, const char* values) {
  if (world_size_ == 1 || count == 0) return absl::OkStatus();
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("gloo allreduce on rank ", rank_, ": an earlier collective failed"));
  }
  const size_t bytes = count * sizeof(T);
  try {
    if (bytes <= direct_max_bytes_ && (world_size_ == 2 || bytes <= kDirectAllReduceWideMaxBytes)) {
      // The sum is made in rank order, ((d0 + d1) + d2) + ..., on every rank alike. data is the
      // output, so from rank 2 on this rank's own payload is kept aside for its turn.
      const T* own = data;
      if (rank_ >= 2) {
        own_.resize(bytes);
        std::memcpy(own_.data(), data, bytes);
        own = reinterpret_cast<const T*>(own_.data());
      }
      std::vector<const T*> pieces(world_size_, nullptr);
      pieces[rank_] = own;
      DirectExchange(data, bytes, [&](int peer, const char* piece) {
        pieces[peer] = reinterpret_cast<const T*>(piece);
      });
      // The pieces stay valid though their buffers are posted again: a peer's next message goes
      // to the other buffer, and the one after waits for this rank's next call.
      reduce(data, pieces[0], pieces[1], count);
      for (int q = 2; q < world_size_; ++q) reduce(data, data, pieces[q], count);
    } else {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(reduce);
      opts.setTimeout(ToChrono(op_timeout_));
      gloo::allreduce(opts);
      sent_bytes_ += RingAllReduceSentBytes(static_cast<int64_t>(bytes), world_size_);
      ++ring_calls_;
    }
  } catch (const std::exception& e) {
    broken_ = true;
    return FromGlooException(e, absl::StrCat("gloo allreduce of ", count, " ", values, " on rank ",
                                             rank_, "/", world_size_));
  }
  return absl::OkStatus();
}

absl::Status GlooAllReducer::AllReduceSum(float* data, size_t count) {
  return AllReduce(data, count, static_cast<ReduceFn>(&gloo::sum<float>), "floats");
}

absl::Status GlooAllReducer::AllReduceSumBf16(uint16_t* data, size_t count) {
  return AllReduce(data, count, &SumBf16, "bf16 values");
}

absl::Status GlooAllReducer::GatherBytes(const void* in, const std::vector<size_t>& counts,
                                         size_t element_bytes, void* out) {
  if (counts.size() != static_cast<size_t>(world_size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo allgather: ", counts.size(), " counts for a world of ", world_size_));
  }
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<size_t> offsets(world_size_, 0);  // of each rank's piece in out
  for (int r = 1; r < world_size_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  // Gloo's ring primes the output from its input buffer; copying here spares it an empty one.
  if (counts[rank_] > 0) {
    std::memcpy(static_cast<char*>(out) + offsets[rank_] * element_bytes, in,
                counts[rank_] * element_bytes);
  }
  if (world_size_ == 1 || total == 0) return absl::OkStatus();
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("gloo allgather on rank ", rank_, ": an earlier collective failed"));
  }
  try {
    const size_t largest = *std::max_element(counts.begin(), counts.end()) * element_bytes;
    if (largest <= direct_max_bytes_) {
      DirectExchange(in, counts[rank_] * element_bytes, [&](int peer, const char* piece) {
        std::memcpy(static_cast<char*>(out) + offsets[peer] * element_bytes, piece,
                    counts[peer] * element_bytes);
      });
    } else {
      gloo::AllgathervOptions opts(context_);
      if (element_bytes == sizeof(float)) {
        opts.setOutput(static_cast<float*>(out), counts);
      } else {
        return absl::InternalError(
            absl::StrCat("gloo allgather of ", element_bytes, "-byte values"));
      }
      opts.setTimeout(ToChrono(op_timeout_));
      gloo::allgatherv(opts);
      sent_bytes_ += RingAllGatherSentBytes(counts, element_bytes, rank_);
      ++ring_calls_;
    }
  } catch (const std::exception& e) {
    broken_ = true;
    return FromGlooException(
        e, absl::StrCat("gloo allgather of ", total, " values on rank ", rank_, "/", world_size_));
  }
  return absl::OkStatus();
}

absl::Status GlooAllReducer::AllGatherV(const float* in, const std::vector<size_t>& counts,
                                        float* out) {
  return GatherBytes(in, counts, sizeof(float), out);
}

absl::Status GlooAllReducer::AllGatherV(const int32_t* in, const std::vector<size_t>& counts,
                                        int32_t* out) {
  static_assert(sizeof(int32_t) == sizeof(float));
  return GatherBytes(in, counts, sizeof(int32_t), out);
}

absl::Status GlooAllReducer::Barrier() {
  float one = 1.0f;
  if (world_size_ == 1) return absl::OkStatus();
  return AllReduceSum(&one, 1);
}

}  // namespace dlrm::worker
