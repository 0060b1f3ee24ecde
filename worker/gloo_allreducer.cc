#include "worker/gloo_allreducer.h"

#include <chrono>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
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

absl::Status GlooAllReducer::AllReduceSum(float* data, size_t count) {
  if (world_size_ == 1 || count == 0) return absl::OkStatus();
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("gloo allreduce on rank ", rank_, ": an earlier collective failed"));
  }
  try {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTimeout(ToChrono(op_timeout_));
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    broken_ = true;
    return FromGlooException(
        e, absl::StrCat("gloo allreduce of ", count, " floats on rank ", rank_, "/", world_size_));
  }
  return absl::OkStatus();
}

absl::Status GlooAllReducer::Barrier() {
  float one = 1.0f;
  if (world_size_ == 1) return absl::OkStatus();
  return AllReduceSum(&one, 1);
}

}  // namespace dlrm::worker
