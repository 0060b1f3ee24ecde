// dlrmctl's renderings of jobs, cluster members and versions: human tables (`table`, the default,
// and `wide` with more columns) and machine documents (`json`, `yaml`, `jsonl`).
//
// A document is the API message in protobuf's canonical JSON mapping with proto field names
// ("job_id", "final_metrics", ...) and every field present; enums are names
// ("JOB_STATE_PENDING") and 64-bit integers are strings, as that mapping says. `yaml` is the same
// tree in YAML block style (so `-o json` and `-o yaml` hold the same data), `json` is indented
// over several lines, `jsonl` is one line. Every function here is pure: no RPC, no clock.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "proto/coordinator.pb.h"
#include "proto/jobs.pb.h"

namespace dlrm::client {

enum class OutputFormat { kTable, kWide, kJson, kYaml, kJsonl };

// "table", "wide", "json", "yaml", "jsonl" (the order of `enum OutputFormat`).
const std::vector<std::string>& OutputFormatNames();
// The format of one of OutputFormatNames(); nullopt for any other name.
std::optional<OutputFormat> ParseOutputFormat(std::string_view name);
// True for json, yaml and jsonl.
bool IsDocumentFormat(OutputFormat format);

// "PENDING", "RUNNING", ...; "PS", "WORKER"; "ALIVE", "EXPIRED", "LEFT".
std::string StateName(dlrm::v1::JobState state);
std::string RoleName(dlrm::v1::Role role);
std::string MemberStateName(dlrm::v1::MemberState state);

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

// What the client read from the coordinator to explain why PENDING jobs wait. Either part may
// be missing when the call that reads it failed; explanations then say less.
struct ClusterSnapshot {
  std::optional<dlrm::v1::GetClusterViewResponse> view;
  // Ids of every PENDING job, oldest first (the coordinator starts them in this order); nullopt
  // when unknown.
  std::optional<std::vector<std::string>> pending_job_ids;
};

// The job's message; when the coordinator recorded none, one that explains the state. PENDING:
// what the job waits for against what `cluster` has, e.g. "waiting for 2 idle workers and 1
// parameter server; the cluster has 1 idle worker (worker-0) and 1 parameter server (ps-0)",
// then "; queued behind job-1" when older pending jobs start first. FAILED and CANCELLED: that no
// reason was recorded. Empty for RUNNING and SUCCEEDED. `cluster` may be null.
std::string JobMessage(const dlrm::v1::Job& job, const ClusterSnapshot* cluster);

// "2026-12-01T17:00:00Z" (UTC) for unix milliseconds; "-" for 0 or less (never set).
std::string UtcTime(int64_t unix_ms);

// One line per state change: "2026-12-01T17:00:00Z  RUNNING     started on ...".
std::string HistoryLine(const dlrm::v1::JobStateChange& change);
// `dlrmctl logs` as one document: {"job_id": "job-1", "history": [JobStateChange...]}, the
// changes oldest first. Precondition: `format` is kJson or kYaml (jsonl is a change per line).
std::string HistoryDocument(const std::string& job_id,
                            const std::vector<dlrm::v1::JobStateChange>& history,
                            OutputFormat format);
// `dlrmctl describe`: the job in detail (as -o wide), its state history, the newest committed
// checkpoints (`checkpoints`, may be empty) and its spec, whose floats are written shortest
// (0.9, not the stored 0.90000000000000002: ShortestFloats).
std::string JobDescription(const dlrm::v1::Job& job, const ClusterSnapshot* cluster,
                           const std::vector<std::string>& checkpoints);

// One job in detail, "key: value" lines; `wide` adds member ids, addresses, per-rank samples
// and times.
std::string JobDetail(const dlrm::v1::Job& job, bool wide, const ClusterSnapshot* cluster);
// One line per job under a header; `wide` adds columns (parameter servers, loss, created time).
// The MESSAGE column is one line; a job that failed with no recovery left starts it with that
// ("no recovery left (3 of max_recoveries 3 used): <the last loss>"), leaving out the list of the
// earlier recoveries (in `describe` and -o wide's detail).
std::string JobTable(const std::vector<dlrm::v1::Job>& jobs, bool wide,
                     const ClusterSnapshot* cluster);
// How fast the current run of a job trains, as a watcher measures it from the jobs of the events
// it sees: steps and samples per second over the last 30 s of progress reports (by the
// coordinator's report times). Only what the run trained while watched counts: a job resumed from
// a checkpoint reports totals (step, samples) that start at the checkpoint's, a rank's first
// report after a start can add a whole checkpoint's samples at once, and a recovery rolls the
// totals back; none of that is a sample trained. A run starts over when the job leaves RUNNING,
// its recoveries change or its step or a rank's samples go back.
class RunSpeed {
 public:
  // Feeds the job of the next event (of one job).
  void Observe(const dlrm::v1::Job& job);
  // nullopt until the reports seen of the run span a second.
  std::optional<double> steps_per_sec() const;
  std::optional<double> samples_per_sec() const;

 private:
  std::optional<double> Seconds() const;  // the span of the window; nullopt under a second
  struct Point {
    int64_t time_ms = 0;  // the report's time (JobProgress.time_ms)
    int64_t step = 0;
    int64_t trained = 0;  // samples the ranks trained since the run's first point
  };
  void Restart();

  std::string job_id_;
  int32_t recoveries_ = 0;
  std::vector<int64_t> rank_samples_;  // at the newest point; 0: no report yet this run
  std::deque<Point> points_;           // oldest first, within the window (at least two)
};

// What `dlrm local`'s progress line (worker::ProgressLine::Update) shows of a job.
struct ProgressFigures {
  int64_t step = 0;
  int64_t samples = 0;  // the job's total (Job.total_samples), a checkpoint's included
  double loss = 0;
  double samples_per_sec = 0;  // what this run trains (RunSpeed), not the total over the time
  int64_t total_steps = -1;    // -1: unknown
};

// `dlrm local`'s progress line for the job it watches: the figures to draw for each event's job,
// the rate measured by a RunSpeed, so that a job resumed from a checkpoint shows what it trains
// now and not its checkpoint's samples over the time since the command started. (ProgressLine's
// ETA counts the steps from the first line it draws: this run's too.)
class JobProgressMeter {
 public:
  // Feeds the job of the next event (of one job). nullopt while the job is not RUNNING or its
  // rate is not measured yet (the first second of its reports): no line that shows no rate.
  std::optional<ProgressFigures> Observe(const dlrm::v1::Job& job);

 private:
  RunSpeed speed_;
};

// One line for a watch event: "job-1 RUNNING step 120/352 (34%) ETA 41s samples 245760 loss
// 0.4512 5120 samples/s", with the JobMessage in parentheses when there is one. The ETA and the
// rate come from `speed` (the watcher's, fed this job already), and are left out without it.
std::string JobEventLine(const dlrm::v1::Job& job, const ClusterSnapshot* cluster,
                         const RunSpeed* speed = nullptr);
// One line per member (id and name) under a header, then the epoch and shard map; `now_ms` ages
// heartbeats; `wide` adds the metrics address, capabilities and registration age.
std::string MemberTable(const dlrm::v1::GetClusterViewResponse& view, int64_t now_ms, bool wide);

// `yaml` with every plain float scalar written in the fewest digits that read back as the same
// double ("beta1: 0.90000000000000002" -> "beta1: 0.9"); everything else is left as it is.
std::string ShortestFloats(absl::string_view yaml);

// A member as people call it: its name, or its id when it registered without one.
std::string MemberLabel(const dlrm::v1::Member& member);

}  // namespace dlrm::client
