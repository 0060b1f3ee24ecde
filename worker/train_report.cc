#include "worker/train_report.h"

#include <cmath>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "worker/input/output_file.h"

namespace dlrm::worker {

bool IsNetworkKey(absl::string_view key) {
  return absl::StartsWith(key, "network_") || absl::StartsWith(key, "tcp_");
}

std::string TrainReportToJson(const TrainReport& r) {
  nlohmann::json j = {{"auc", r.auc},
                      {"logloss", r.logloss},
                      {"accuracy", r.accuracy},
                      {"samples_per_sec", r.samples_per_sec},
                      {"steps", r.steps},
                      {"train_samples", r.train_samples},
                      {"eval_samples", r.eval_samples},
                      {"train_seconds", r.train_seconds},
                      {"skipped_lines", r.skipped_lines},
                      {"ps_bytes_per_sample", r.ps_bytes_per_sample},
                      {"hot_hit_rate", r.hot_hit_rate},
                      {"hot_rows", r.hot_rows},
                      {"hot_migrations", r.hot_migrations}};
  if (r.target_auc != 0) {
    j["target_auc"] = r.target_auc;
    j["reached_target_step"] = r.reached_target_step;
  }
  for (const auto& [key, value] : r.network) j[key] = value;
  return j.dump();
}

absl::StatusOr<TrainReport> TrainReportFromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("not a JSON object: '", text, "'"));
  }
  TrainReport r;
  auto get = [&j](const char* key, auto* out) {
    if (j.contains(key) && j[key].is_number()) *out = j[key].get<std::decay_t<decltype(*out)>>();
  };
  get("auc", &r.auc);
  get("logloss", &r.logloss);
  get("accuracy", &r.accuracy);
  get("samples_per_sec", &r.samples_per_sec);
  get("steps", &r.steps);
  get("train_samples", &r.train_samples);
  get("eval_samples", &r.eval_samples);
  get("train_seconds", &r.train_seconds);
  get("skipped_lines", &r.skipped_lines);
  get("ps_bytes_per_sample", &r.ps_bytes_per_sample);
  get("hot_hit_rate", &r.hot_hit_rate);
  get("hot_rows", &r.hot_rows);
  get("hot_migrations", &r.hot_migrations);
  get("target_auc", &r.target_auc);
  get("reached_target_step", &r.reached_target_step);
  for (const auto& [key, value] : j.items()) {
    if (IsNetworkKey(key) && value.is_number()) r.network[key] = value.get<double>();
  }
  return r;
}

absl::Status WriteTrainReport(const std::string& path, const TrainReport& report,
                              const std::string& what) {
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(path, what));
  DLRM_RETURN_IF_ERROR(out->Write(absl::StrCat(TrainReportToJson(report), "\n")));
  return out->Commit();
}

std::string FormatAuc(double auc) {
  // AUC is undefined when the eval data holds one class only: "nan" said nothing of why.
  if (std::isnan(auc)) return "n/a (one class)";
  return absl::StrFormat("%.4f", auc);
}

std::string TrainReportSummary(const TrainReport& r) {
  return absl::StrFormat(
      "AUC %s  logloss %.4f  accuracy %.4f  (eval %d samples; %d steps, %.0f samples/s)",
      FormatAuc(r.auc), r.logloss, r.accuracy, r.eval_samples, r.steps, r.samples_per_sec);
}

}  // namespace dlrm::worker
