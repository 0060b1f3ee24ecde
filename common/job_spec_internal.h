// Internals of the job spec parser (common/job_spec.h), shared by its .cc files and by nothing
// else. The parser is split by responsibility:
//   job_spec.cc         the public entry points (ParseJobSpec, LoadJobSpec, WorkerBatchSize,
//                       ParseByteSize) and the size limit on the text;
//   job_spec_parse.cc   reads each section of the YAML (model, tables, optimizer, training,
//                       checkpoint, data) into a JobSpec, checking each value as it goes;
//   job_spec_checks.cc  the checks those readers share, each naming the key in its message;
//   job_spec_yaml.cc    JobSpecToYaml, the spec written back.
// Every error is INVALID_ARGUMENT whose message starts with the dotted key ("model.top_mlp: ...").
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::common::job_spec_internal {

// INVALID_ARGUMENT "key: what".
absl::Status Invalid(const std::string& key, const std::string& what);

// INVALID_ARGUMENT naming `key`, the value and the limit when value > limit.
absl::Status AtMost(const std::string& key, int64_t value, int64_t limit, const char* limit_name);

// Text a user wrote (a name, a path): at most `limit` bytes of valid UTF-8 without control
// characters.
absl::Status CheckText(const std::string& key, const std::string& text, int64_t limit,
                       const char* limit_name);

// A finite value in (0, kMaxOptimizerValue], or [0, kMaxOptimizerValue] when `zero_ok`.
absl::Status CheckOptimizerValue(const std::string& key, double value, bool zero_ok);

// Refuses keys of `node` that are not in `allowed` (and a `node` that is not a mapping), naming
// the full dotted key.
absl::Status CheckKeys(const YAML::Node& node, const std::string& prefix,
                       const std::set<std::string>& allowed);

// A table's own pooling: "" (model.pooling's), sum or mean.
absl::Status CheckPooling(const std::string& key, const std::string& pooling);

// A row dtype: fp32, fp16 or bf16.
absl::Status CheckRowDtype(const std::string& key, const std::string& dtype);

// The dense parameters and the largest activation of one batch within their limits; `spec` is
// otherwise valid already.
absl::Status CheckModelSize(const JobSpec& spec);

// Refuses a key given twice in one mapping anywhere in `yaml_text` (already known to be valid
// YAML), naming its dotted path and both lines: "training.epochs: duplicate key at line 5 (first
// at line 4)". Reads the parser's events, so an alias is never expanded.
absl::Status CheckDuplicateKeys(const std::string& yaml_text);

// Reads and validates the mapping at the root of a job spec (job_spec_parse.cc). Values the job
// ignores are appended to `warnings`, each naming its key (job_spec.h, ParseJobSpec).
absl::StatusOr<JobSpec> ParseNode(const YAML::Node& root, std::vector<std::string>* warnings);

}  // namespace dlrm::common::job_spec_internal
