// Fuzz target: a parameter server's checks of a LoadJob request (server/ps_job.h
// ValidateLoadRequest) on any bytes that parse as one. Every request is accepted or refused
// naming the value; none makes it allocate.
#include <cstddef>
#include <cstdint>

#include "google/protobuf/stubs/logging.h"
#include "proto/ps.pb.h"
#include "server/ps_job.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Invalid UTF-8 in a string field is a parse failure that protobuf also logs: keep quiet.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  dlrm::v1::LoadJobRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)dlrm::server::ValidateLoadRequest(request);
  return 0;
}
