// The shape of Criteo input (13 dense features and 26 categorical features per sample), which
// every input format a job spec can name (TSV, binary one-hot and binary multi-hot) has, and the
// check that a spec's model fits it. Header-only, so that the coordinator (which refuses such a
// spec at SubmitJob) and the workers (which read the data) share it without a library between.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace dlrm::common {

inline constexpr int kCriteoNumDense = 13;
inline constexpr int kCriteoNumCategorical = 26;

// INVALID_ARGUMENT naming the key and both numbers when the spec's model does not match Criteo
// input: model.dense_features must be 13 and there must be 26 tables (one-hot or multi-hot data
// alike: a multi-hot bag is several ids of the same table).
inline absl::Status CheckModelFitsCriteoInput(const JobSpec& spec) {
  if (spec.dense_features != kCriteoNumDense) {
    return absl::InvalidArgumentError(absl::StrCat("model.dense_features: Criteo input has ",
                                                   kCriteoNumDense, " dense features, got ",
                                                   spec.dense_features));
  }
  if (spec.tables.size() != static_cast<size_t>(kCriteoNumCategorical)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tables: Criteo input has ", kCriteoNumCategorical,
                     " categorical features (a table each), got ", spec.tables.size(), " tables"));
  }
  return absl::OkStatus();
}

}  // namespace dlrm::common
