// Fuzz target: one line of Criteo TSV (worker/input/criteo_tsv.h). Any bytes give a record or an
// error naming the field, never a crash.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "worker/input/criteo_tsv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dlrm::worker::CriteoRecord record;
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  (void)dlrm::worker::ParseCriteoLine(line, &record);
  (void)dlrm::worker::ParseCriteoLine(line, &record, /*label_optional=*/true);
  return 0;
}
