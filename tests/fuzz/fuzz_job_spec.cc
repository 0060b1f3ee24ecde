// Fuzz target: the job-spec parser (common/job_spec.h) and byte sizes. Any text gives a spec or
// an INVALID_ARGUMENT naming the key, never a crash, an overflow or a huge allocation; a spec
// that parses is emitted and parsed back to the same YAML.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)dlrm::common::ParseByteSize(text);
  auto spec = dlrm::common::ParseJobSpec(text, "<fuzz>");
  if (spec.ok()) {
    const std::string yaml = dlrm::common::JobSpecToYaml(*spec);
    auto again = dlrm::common::ParseJobSpec(yaml, "<fuzz round trip>");
    if (!again.ok() || dlrm::common::JobSpecToYaml(*again) != yaml) std::abort();
  }
  return 0;
}
