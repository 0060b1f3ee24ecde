// ps_lookup_bench: parameter-server Lookup over gRPC on loopback against a bare gRPC call that
// moves the same bytes, measured in one run (issue 3, item 11: target ratio >= 0.7).
//
// Shape: kaggle-shape (26 tables at the Criteo Kaggle cardinalities), 2048 samples x 26 ids per
// request, ids drawn from a Zipf sampler per table, dim 16 and 64; by default deduplicated per
// table (what the trainer sends: about 15.3k ids), with --dedup 0 all 53,248 as drawn. The PS side
// is GrpcPsClient::Lookup against one ParameterServer. Two baselines carry the same id bytes and
// answer a pre-built payload of the rows' size, inline:
//   bare_raw  dlrm.v1.Bench/TransferZeroCopy: the same bytes on the wire, sent from a static buffer
//             and read by the client straight into its own buffer (one copy, as the PS client
//             makes): the least these bytes cost through gRPC, the strongest baseline (`ratio` =
//             PS rows/s over this one's);
//   bare      dlrm.v1.Bench/Transfer with generated messages on both sides, a weaker baseline
//             (ratio_vs_transfer).
// Rows are first touched in a warm-up pass, so the timed part is steady-state serving from the
// memory tier. Blocks of the three alternate to share noise.
//
//   build/bin/ps_lookup_bench [--seconds 1.5] [--dims 16,64] [--zipf 1.05] [--ps-threads 2]
//                             [--dedup 0] [--max-rows N]
//                             [--bare 0]   (0: skip the baselines, to profile the PS path alone)
//
// Prints one JSON object to stdout. --help prints the flags; an unknown flag, or one without its
// value, is an error (exit 2).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/allocator.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "embedding/dedup.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "nlohmann/json.hpp"
#include "proto/bench.grpc.pb.h"
#include "server/ps_server.h"
#include "worker/input/zipf_sampler.h"
#include "worker/ps_client.h"

namespace dlrm::bench {
namespace {

constexpr int64_t kKaggleRows[26] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};
constexpr int kBatch = 2048;

// The baselines: answer every Transfer / TransferZeroCopy with a pre-built payload of the asked
// size, inline on the reactor (no table work at all).
class TransferService final : public dlrm::v1::Bench::WithRawCallbackMethod_TransferZeroCopy<
                                  dlrm::v1::Bench::CallbackService> {
 public:
  explicit TransferService(int64_t max_bytes) : payload_(static_cast<size_t>(max_bytes), 'x') {}
  grpc::ServerUnaryReactor* Transfer(grpc::CallbackServerContext* context,
                                     const dlrm::v1::TransferRequest* request,
                                     dlrm::v1::TransferResponse* response) override {
    const size_t n = std::min<size_t>(payload_.size(), request->response_bytes());
    response->mutable_payload()->assign(payload_.data(), n);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // A serialised TransferResponse: a tag and a length, then the payload sent from payload_ as is.
  grpc::ServerUnaryReactor* TransferZeroCopy(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request_bytes,
                                             grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    dlrm::v1::TransferRequest request;
    grpc::ByteBuffer copy(*request_bytes);
    grpc::Status status =
        grpc::SerializationTraits<dlrm::v1::TransferRequest>::Deserialize(&copy, &request);
    if (status.ok()) {
      const size_t n = std::min<size_t>(payload_.size(), request.response_bytes());
      char header[16];
      google::protobuf::uint8* end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
          (1 << 3) | 2, reinterpret_cast<google::protobuf::uint8*>(header));
      end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(n),
                                                                          end);
      grpc::Slice slices[2] = {
          grpc::Slice(header, static_cast<size_t>(reinterpret_cast<char*>(end) - header)),
          grpc::Slice(payload_.data(), n, grpc::Slice::STATIC_SLICE)};
      *response = grpc::ByteBuffer(slices, 2);
    }
    reactor->Finish(status);
    return reactor;
  }

 private:
  const std::string payload_;
};

// The client of TransferZeroCopy: sends a generated request, reads the payload of the answer
// straight into `out` (one copy, like GrpcPsClient::Lookup's rows).
class RawTransferClient {
 public:
  explicit RawTransferClient(std::shared_ptr<grpc::Channel> channel) : stub_(std::move(channel)) {}
  absl::Status Call(const dlrm::v1::TransferRequest& request, std::vector<char>* out) {
    auto context = common::MakeClientContext(absl::Seconds(30));
    grpc::CompletionQueue cq;
    grpc::ByteBuffer response;
    grpc::Status status;
    auto call =
        stub_.PrepareUnaryCall(context.get(), "/dlrm.v1.Bench/TransferZeroCopy", request, &cq);
    call->StartCall();
    call->Finish(&response, &status, nullptr);
    void* tag;
    bool ok;
    cq.Next(&tag, &ok);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    if (!status.ok()) return common::FromGrpcStatus(status);
    grpc::ProtoBufferReader reader(&response);
    google::protobuf::io::CodedInputStream in(&reader);
    uint32_t length = 0;
    if (in.ReadTag() != ((1 << 3) | 2) || !in.ReadVarint32(&length)) {
      return absl::InternalError("TransferZeroCopy: unexpected answer");
    }
    out->resize(length);
    if (!in.ReadRaw(out->data(), static_cast<int>(length))) {
      return absl::InternalError("TransferZeroCopy: truncated answer");
    }
    return absl::OkStatus();
  }

 private:
  grpc::TemplatedGenericStub<dlrm::v1::TransferRequest, grpc::ByteBuffer> stub_;
};

struct Flags {
  double seconds = 1.5;
  std::vector<int> dims = {16, 64};
  double zipf = 1.05;
  int batches = 16;
  int ps_threads = 2;
  int64_t max_rows = 0;  // PsClientOptions::max_rows_per_request (0: the client's default)
  bool bare = true;      // --bare 0: time the PS path only (for profiling it)
  bool dedup = true;     // --dedup 0: all 2048 x 26 ids per request, repeats included
};

constexpr char kUsage[] =
    "usage: ps_lookup_bench [--seconds 1.5] [--dims 16,64] [--zipf 1.05] [--batches 16]\n"
    "                       [--ps-threads 2] [--dedup 0|1] [--max-rows N] [--bare 0|1]\n";

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 == argc) {
      std::cerr << "ps_lookup_bench: " << key << " needs a value\n" << kUsage;
      std::exit(2);
    }
    const std::string value = argv[i + 1];
    bool ok = true;
    if (key == "--seconds") {
      ok = absl::SimpleAtod(value, &f.seconds);
    } else if (key == "--zipf") {
      ok = absl::SimpleAtod(value, &f.zipf);
    } else if (key == "--batches") {
      ok = absl::SimpleAtoi(value, &f.batches);
    } else if (key == "--max-rows") {
      ok = absl::SimpleAtoi(value, &f.max_rows);
    } else if (key == "--ps-threads") {
      ok = absl::SimpleAtoi(value, &f.ps_threads);
    } else if (key == "--dedup") {
      ok = value == "0" || value == "1";
      f.dedup = value == "1";
    } else if (key == "--bare") {
      ok = value == "0" || value == "1";
      f.bare = value == "1";
    } else if (key == "--dims") {
      f.dims.clear();
      for (absl::string_view d : absl::StrSplit(value, ',')) {
        int dim = 0;
        ok = ok && absl::SimpleAtoi(d, &dim) && dim > 0;
        f.dims.push_back(dim);
      }
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "ps_lookup_bench: bad flag " << key << " " << value << "\n";
      std::exit(2);
    }
  }
  return f;
}

// `count` batches of kaggle-shape ids: per table the ids of 2048 samples, deduplicated (what the
// trainer sends) or as drawn (2048 x 26 = 53,248 ids, repeats included).
std::vector<std::vector<embedding::TableRows>> MakeBatches(int count, double exponent, bool dedup) {
  std::vector<worker::ZipfSampler> samplers;
  for (int64_t rows : kKaggleRows) samplers.emplace_back(rows, exponent);
  worker::Xoshiro256 rng(2024);
  std::vector<std::vector<embedding::TableRows>> batches(count);
  std::vector<int64_t> ids(kBatch), unique, inverse;
  for (auto& batch : batches) {
    for (int t = 0; t < 26; ++t) {
      for (int i = 0; i < kBatch; ++i) ids[i] = samplers[t].Sample(rng) - 1;
      if (dedup) {
        embedding::Deduplicate(ids, &unique, &inverse);
        batch.push_back({t, unique, {}});
      } else {
        batch.push_back({t, ids, {}});
      }
    }
  }
  return batches;
}

int64_t UniqueIds(const std::vector<embedding::TableRows>& batch) {
  int64_t n = 0;
  for (const auto& r : batch) n += static_cast<int64_t>(r.ids.size());
  return n;
}

struct Timing {
  int64_t rows = 0;
  int64_t requests = 0;
  absl::Duration elapsed;
};

int Run(const Flags& flags) {
  const auto batches = MakeBatches(flags.batches, flags.zipf, flags.dedup);
  int64_t max_unique = 0, total_unique = 0;
  for (const auto& b : batches) {
    max_unique = std::max(max_unique, UniqueIds(b));
    total_unique += UniqueIds(b);
  }
  const int max_dim = *std::max_element(flags.dims.begin(), flags.dims.end());
  TransferService transfer(max_unique * 4 * max_dim);
  auto bare_server = common::GrpcServer::Start({}, {&transfer});
  if (!bare_server.ok()) {
    std::cerr << bare_server.status() << "\n";
    return 1;
  }
  auto bare_channel = common::MakeChannel({.target = (*bare_server)->address()});
  auto bare_stub = dlrm::v1::Bench::NewStub(*bare_channel);
  RawTransferClient raw_client(*bare_channel);
  std::vector<char> raw_out;

  nlohmann::json results = nlohmann::json::array();
  for (int dim : flags.dims) {
    const std::string dir =
        "/tmp/ps_lookup_bench_" + std::to_string(getpid()) + "_" + std::to_string(dim);
    auto metrics = common::MetricsRegistry::Create({});
    if (!metrics.ok()) {
      std::cerr << metrics.status() << "\n";
      return 1;
    }
    prometheus::Histogram& served =
        (*metrics)->Histogram("ps_lookup_seconds", "", common::MetricsRegistry::LatencyBuckets());
    server::PsOptions ps_options;
    ps_options.metrics = metrics->get();
    ps_options.data_dir = dir;
    ps_options.memory_budget_bytes = 512ll << 20;  // holds every row the batches touch
    ps_options.num_threads = flags.ps_threads;
    auto ps = server::ParameterServer::Start(ps_options);
    if (!ps.ok()) {
      std::cerr << ps.status() << "\n";
      return 1;
    }
    worker::PsClientOptions client_options;
    client_options.ps_addresses = {(*ps)->address()};
    client_options.job_id = "bench";
    client_options.job_epoch = 0;
    client_options.max_rows_per_request = flags.max_rows;
    for (int t = 0; t < 26; ++t) {
      client_options.tables.push_back({"C" + std::to_string(t + 1), kKaggleRows[t], dim});
    }
    auto client = worker::GrpcPsClient::Create(client_options);
    absl::Status status = (*client)->LoadJobOnAll({});
    // Warm-up: creates every row the timed loops will ask for.
    std::vector<std::vector<embedding::TableRows>> work = batches;
    for (auto& b : work) {
      if (status.ok()) status = (*client)->Lookup(-1, absl::MakeSpan(b));
    }
    if (!status.ok()) {
      std::cerr << status << "\n";
      return 1;
    }
    std::vector<dlrm::v1::TransferRequest> transfers(batches.size());
    for (size_t i = 0; i < batches.size(); ++i) {
      std::string* payload = transfers[i].mutable_payload();
      for (const auto& r : batches[i]) {
        payload->append(reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * 8);
      }
      transfers[i].set_response_bytes(UniqueIds(batches[i]) * 4 * dim);
    }

    const prometheus::ClientMetric before = served.Collect();
    Timing ps_time, bare_time, raw_time;
    const absl::Duration block = absl::Seconds(flags.seconds / 4);
    for (int round = 0; round < 4 && status.ok(); ++round) {
      absl::Time start = absl::Now(), end = start + block;
      size_t i = 0;
      while (absl::Now() < end && status.ok()) {
        auto& b = work[i++ % work.size()];
        status = (*client)->Lookup(-1, absl::MakeSpan(b));
        ps_time.rows += UniqueIds(b);
        ++ps_time.requests;
      }
      ps_time.elapsed += absl::Now() - start;
      start = absl::Now();
      end = start + block;
      i = 0;
      while (flags.bare && absl::Now() < end && status.ok()) {
        const size_t k = i++ % transfers.size();
        dlrm::v1::TransferResponse response;
        status = common::FromGrpcStatus(bare_stub->Transfer(
            common::MakeClientContext(absl::Seconds(30)).get(), transfers[k], &response));
        bare_time.rows += UniqueIds(batches[k]);
        ++bare_time.requests;
      }
      bare_time.elapsed += absl::Now() - start;
      start = absl::Now();
      end = start + block;
      i = 0;
      while (flags.bare && absl::Now() < end && status.ok()) {
        const size_t k = i++ % transfers.size();
        status = raw_client.Call(transfers[k], &raw_out);
        raw_time.rows += UniqueIds(batches[k]);
        ++raw_time.requests;
      }
      raw_time.elapsed += absl::Now() - start;
    }
    const prometheus::ClientMetric after = served.Collect();
    const double server_seconds = after.histogram.sample_sum - before.histogram.sample_sum;
    (*ps)->Shutdown();
    ps->reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    if (!status.ok()) {
      std::cerr << status << "\n";
      return 1;
    }
    const double ps_rate = ps_time.rows / absl::ToDoubleSeconds(ps_time.elapsed);
    const double bare_rate = bare_time.rows / absl::ToDoubleSeconds(bare_time.elapsed);
    const double raw_rate = raw_time.rows / absl::ToDoubleSeconds(raw_time.elapsed);
    results.push_back({
        {"dim", dim},
        {"unique_ids_per_request", static_cast<double>(total_unique) / batches.size()},
        {"response_bytes_per_request",
         static_cast<double>(total_unique) / batches.size() * 4 * dim},
        {"ps_rows_per_s", ps_rate},
        {"bare_rows_per_s", bare_rate},
        {"ps_ms_per_request", absl::ToDoubleMilliseconds(ps_time.elapsed) / ps_time.requests},
        {"bare_ms_per_request", absl::ToDoubleMilliseconds(bare_time.elapsed) / bare_time.requests},
        {"bare_raw_ms_per_request",
         absl::ToDoubleMilliseconds(raw_time.elapsed) / raw_time.requests},
        {"ps_server_ms_per_request", 1e3 * server_seconds / ps_time.requests},
        {"ratio", ps_rate / raw_rate},
        {"ratio_vs_transfer", ps_rate / bare_rate},
    });
  }
  nlohmann::json out = {{"benchmark", "ps_lookup"},
                        {"shape", "kaggle-shape"},
                        {"samples_per_request", kBatch},
                        {"tables", 26},
                        {"zipf_exponent", flags.zipf},
                        {"deduplicated", flags.dedup},
                        {"ps_threads", flags.ps_threads},
                        {"seconds_per_dim", flags.seconds},
                        {"target_ratio", 0.7},
                        {"results", results}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}

}  // namespace
}  // namespace dlrm::bench

int main(int argc, char** argv) {
  // As in the dlrm processes: without it every path faults in each multi-megabyte receive buffer
  // page by page (DLRM_DEFAULT_MALLOC=1 to see it), which hides the difference being measured.
  dlrm::common::ConfigureAllocatorForLargeBuffers();
  return dlrm::bench::Run(dlrm::bench::ParseFlags(argc, argv));
}
