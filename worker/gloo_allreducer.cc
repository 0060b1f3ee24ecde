#include "worker/gloo_allreducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "embedding/row_dtype.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
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

}  // namespace

GlooAllReducer::GlooAllReducer(int rank, int world_size, absl::Duration op_timeout)
    : rank_(rank), world_size_(world_size), op_timeout_(op_timeout) {}

GlooAllReducer::~GlooAllReducer() = default;

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
  DLRM_LOG(INFO) << "gloo: rank " << options.rank << "/" << options.world_size
                 << " connected (prefix " << options.prefix << ")";
  return reducer;
}

template <typename T>
absl::Status GlooAllReducer::RingAllReduce(T* data, size_t count, ReduceFn reduce,
                                           const char* values) {
  if (world_size_ == 1 || count == 0) return absl::OkStatus();
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("gloo allreduce on rank ", rank_, ": an earlier collective failed"));
  }
  try {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(reduce);
    opts.setTimeout(ToChrono(op_timeout_));
    gloo::allreduce(opts);
    sent_bytes_ += RingAllReduceSentBytes(static_cast<int64_t>(count * sizeof(T)), world_size_);
  } catch (const std::exception& e) {
    broken_ = true;
    return FromGlooException(e, absl::StrCat("gloo allreduce of ", count, " ", values, " on rank ",
                                             rank_, "/", world_size_));
  }
  return absl::OkStatus();
}

absl::Status GlooAllReducer::AllReduceSum(float* data, size_t count) {
  return RingAllReduce(data, count, static_cast<ReduceFn>(&gloo::sum<float>), "floats");
}

absl::Status GlooAllReducer::AllReduceSumBf16(uint16_t* data, size_t count) {
  return RingAllReduce(data, count, &SumBf16, "bf16 values");
}

absl::Status GlooAllReducer::GatherBytes(const void* in, const std::vector<size_t>& counts,
                                         size_t element_bytes, void* out) {
  if (counts.size() != static_cast<size_t>(world_size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo allgather: ", counts.size(), " counts for a world of ", world_size_));
  }
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  size_t offset = 0;
  for (int r = 0; r < rank_; ++r) offset += counts[r];
  // Gloo primes the output from its input buffer; copying here spares it an empty one.
  if (counts[rank_] > 0) {
    std::memcpy(static_cast<char*>(out) + offset * element_bytes, in,
                counts[rank_] * element_bytes);
  }
  if (world_size_ == 1 || total == 0) return absl::OkStatus();
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("gloo allgather on rank ", rank_, ": an earlier collective failed"));
  }
  try {
    gloo::AllgathervOptions opts(context_);
    if (element_bytes == sizeof(float)) {
      opts.setOutput(static_cast<float*>(out), counts);
    } else {
      return absl::InternalError(absl::StrCat("gloo allgather of ", element_bytes, "-byte values"));
    }
    opts.setTimeout(ToChrono(op_timeout_));
    gloo::allgatherv(opts);
    sent_bytes_ += RingAllGatherSentBytes(counts, element_bytes, rank_);
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
