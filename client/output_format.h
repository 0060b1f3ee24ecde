// dlrmctl's machine documents (`-o json`, `yaml`, `jsonl`) and the output formats it knows.
//
// A document is the API message in protobuf's canonical JSON mapping with proto field names
// ("job_id", "final_metrics", ...) and every field present; enums are names
// ("JOB_STATE_PENDING") and 64-bit integers are strings, as that mapping says. `yaml` is the same
// tree in YAML block style (so `-o json` and `-o yaml` hold the same data), `json` is indented
// over several lines, `jsonl` is one line. Every function here is pure: no RPC, no clock.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "proto/jobs.pb.h"

namespace dlrm::client {

enum class OutputFormat { kTable, kWide, kJson, kYaml, kJsonl };

// "table", "wide", "json", "yaml", "jsonl" (the order of `enum OutputFormat`).
const std::vector<std::string>& OutputFormatNames();
// The format of one of OutputFormatNames(); nullopt for any other name.
std::optional<OutputFormat> ParseOutputFormat(std::string_view name);
// True for json, yaml and jsonl.
bool IsDocumentFormat(OutputFormat format);

// One JSON object on one line, no newline.
std::string ToJson(const google::protobuf::Message& message);
// The message in YAML block style, ending in a newline.
std::string ToYaml(const google::protobuf::Message& message);
// One document of `message` in a document format, ending in a newline: kJson indented, kYaml
// block style, kJsonl one line. Precondition: IsDocumentFormat(format).
std::string ToDocument(const google::protobuf::Message& message, OutputFormat format);

// The versions document: {"client_version": ..., "server_version": ...}; the server's is null
// when the coordinator could not be asked. Precondition: IsDocumentFormat(format).
std::string VersionDocument(const std::string& client_version,
                            const std::optional<std::string>& server_version, OutputFormat format);

// `dlrmctl logs` as one document: {"job_id": "job-1", "history": [JobStateChange...]}, the
// changes oldest first. Precondition: `format` is kJson or kYaml (jsonl is a change per line).
std::string HistoryDocument(const std::string& job_id,
                            const std::vector<dlrm::v1::JobStateChange>& history,
                            OutputFormat format);

// `yaml` with every plain float scalar written in the fewest digits that read back as the same
// double ("beta1: 0.90000000000000002" -> "beta1: 0.9"); everything else is left as it is.
std::string ShortestFloats(absl::string_view yaml);

}  // namespace dlrm::client
