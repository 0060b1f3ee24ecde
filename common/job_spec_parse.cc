// Reads each section of a job spec's YAML into a JobSpec, checking every value as it is read
// (the checks are in job_spec_checks.cc).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/limits.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::common::job_spec_internal {
namespace {

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

// Reads an integer as decimal text: an optional sign, then 0 or digits without a leading zero.
// yaml-cpp reads YAML 1.1's 0400 as octal (256), 0x100 as hex, and refuses 09; YAML 1.2 reads
// 0400 as 400. Refusing a leading zero and every prefix leaves no doubt which was meant.
template <typename T>
absl::Status ReadInteger(const YAML::Node& node, const std::string& key, T* out) {
  const std::string text = node.IsScalar() ? node.Scalar() : YAML::Dump(node);
  const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  const bool digits = node.IsScalar() && sign < text.size() &&
                      std::all_of(text.begin() + sign, text.end(), [](char c) {
                        return std::isdigit(static_cast<unsigned char>(c)) != 0;
                      });
  if (!digits) return Invalid(key, absl::StrCat("cannot read '", text, "' as an integer"));
  if (text.size() - sign > 1 && text[sign] == '0') {
    const size_t first = text.find_first_not_of('0', sign);
    return Invalid(key,
                   absl::StrCat("'", text,
                                "' has a leading zero (integers are decimal, never octal: "
                                "write ",
                                first == std::string::npos
                                    ? std::string("0")
                                    : absl::StrCat(text[0] == '-' ? "-" : "", text.substr(first)),
                                ")"));
  }
  // Read at 64 bits, then narrowed: T is int, int64_t or uint64_t (the seed).
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  Wide wide = 0;
  bool fits = (std::is_signed_v<T> || text[0] != '-') && absl::SimpleAtoi(text, &wide);
  if constexpr (sizeof(T) < sizeof(Wide)) {
    fits = fits && wide >= std::numeric_limits<T>::min() && wide <= std::numeric_limits<T>::max();
  }
  if (!fits) {
    return Invalid(
        key, absl::StrCat("'", text, "' is out of range [", std::numeric_limits<T>::min(), ", ",
                          std::numeric_limits<T>::max(), "]"));
  }
  *out = static_cast<T>(wide);
  return absl::OkStatus();
}

template <typename T>
absl::Status Read(const YAML::Node& parent, const std::string& prefix, const std::string& key,
                  T* out) {
  YAML::Node node = parent[key];
  if (!node) return absl::OkStatus();
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return ReadInteger(node, Join(prefix, key), out);
  } else {
    try {
      *out = node.as<T>();
    } catch (const YAML::Exception&) {
      return Invalid(Join(prefix, key), absl::StrCat("cannot read '", YAML::Dump(node), "' as ",
                                                     std::is_same_v<T, std::string> ? "a string"
                                                     : std::is_floating_point_v<T>  ? "a number"
                                                                                    : "a boolean"));
    }
    return absl::OkStatus();
  }
}

absl::Status ReadIntList(const YAML::Node& parent, const std::string& prefix,
                         const std::string& key, std::vector<int>* out) {
  YAML::Node node = parent[key];
  if (!node) return absl::OkStatus();
  if (!node.IsSequence()) return Invalid(Join(prefix, key), "must be a list of integers");
  DLRM_RETURN_IF_ERROR(AtMost(absl::StrCat(Join(prefix, key), " (layers)"),
                              static_cast<int64_t>(node.size()), kMaxMlpLayers, "kMaxMlpLayers"));
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    int v = 0;
    DLRM_RETURN_IF_ERROR(ReadInteger(node[i], absl::StrCat(Join(prefix, key), "[", i, "]"), &v));
    if (v <= 0) {
      return Invalid(absl::StrCat(Join(prefix, key), "[", i, "]"),
                     absl::StrCat("width must be > 0, got ", v));
    }
    DLRM_RETURN_IF_ERROR(
        AtMost(absl::StrCat(Join(prefix, key), "[", i, "]"), v, kMaxMlpWidth, "kMaxMlpWidth"));
    out->push_back(v);
  }
  return absl::OkStatus();
}

absl::Status ReadPaths(const YAML::Node& parent, const std::string& prefix, const std::string& key,
                       std::vector<std::string>* out) {
  YAML::Node node = parent[key];
  if (!node) return absl::OkStatus();
  out->clear();
  // An empty path names no file: it failed only when the run opened it ("cannot open input
  // file : No such file or directory"), without the key.
  auto check = [&](const std::string& name, const std::string& path) {
    if (path.empty()) {
      return Invalid(name, "empty path (leave the key out, or give [], for no files)");
    }
    return CheckText(name, path, kMaxPathBytes, "kMaxPathBytes");
  };
  if (node.IsScalar()) {
    out->push_back(node.as<std::string>());
    return check(Join(prefix, key), out->back());
  }
  if (!node.IsSequence()) return Invalid(Join(prefix, key), "must be a path or a list of paths");
  for (const auto& item : node) {
    if (!item.IsScalar()) {
      return Invalid(absl::StrCat(Join(prefix, key), "[", out->size(), "]"), "must be a path");
    }
    out->push_back(item.as<std::string>());
    DLRM_RETURN_IF_ERROR(
        check(absl::StrCat(Join(prefix, key), "[", out->size() - 1, "]"), out->back()));
  }
  return absl::OkStatus();
}

// optimizer.schedule (common/lr_schedule.h).
absl::Status ReadSchedule(const YAML::Node& node, LrSchedule* out) {
  if (!node) return absl::OkStatus();
  const std::string prefix = "optimizer.schedule";
  if (!node.IsMap()) return Invalid(prefix, "must be a map of warmup_steps, decay_start, ...");
  DLRM_RETURN_IF_ERROR(CheckKeys(
      node, prefix, {"warmup_steps", "decay_start", "decay_steps", "decay_power", "end_factor"}));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "warmup_steps", &out->warmup_steps));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "decay_start", &out->decay_start));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "decay_steps", &out->decay_steps));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "decay_power", &out->decay_power));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "end_factor", &out->end_factor));
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"warmup_steps", out->warmup_steps},
        {"decay_start", out->decay_start},
        {"decay_steps", out->decay_steps}}) {
    if (value < 0) return Invalid(Join(prefix, key), absl::StrCat("must be >= 0, got ", value));
    DLRM_RETURN_IF_ERROR(AtMost(Join(prefix, key), value, kMaxScheduleSteps, "kMaxScheduleSteps"));
  }
  if (out->decay_steps > 0 && out->decay_start < out->warmup_steps) {
    return Invalid(Join(prefix, "decay_start"),
                   absl::StrCat(out->decay_start, " is inside the warm-up of ", out->warmup_steps,
                                " steps: the decay starts after it"));
  }
  if (!(std::isfinite(out->decay_power) && out->decay_power > 0 && out->decay_power <= 100)) {
    return Invalid(Join(prefix, "decay_power"),
                   absl::StrCat("must be in (0, 100], got ", out->decay_power));
  }
  if (!(out->end_factor >= 0 && out->end_factor <= 1)) {
    return Invalid(
        Join(prefix, "end_factor"),
        absl::StrCat("must be in [0, 1] (a fraction of the learning rate), got ", out->end_factor));
  }
  return absl::OkStatus();
}

absl::Status ReadOptimizer(const YAML::Node& node, const std::string& prefix, bool dense,
                           OptimizerSpec* out, std::vector<std::string>* warnings) {
  if (!node) return absl::OkStatus();
  std::set<std::string> allowed = {"type", "learning_rate", "epsilon", "beta1", "beta2"};
  if (dense) {
    allowed.insert("weight_decay");
  } else {
    allowed.insert("initial_accumulator");
  }
  DLRM_RETURN_IF_ERROR(CheckKeys(node, prefix, allowed));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "type", &out->type));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "learning_rate", &out->learning_rate));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "epsilon", &out->epsilon));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "beta1", &out->beta1));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "beta2", &out->beta2));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "weight_decay", &out->weight_decay));
  DLRM_RETURN_IF_ERROR(Read(node, prefix, "initial_accumulator", &out->initial_accumulator));
  std::set<std::string> types =
      dense ? std::set<std::string>{"sgd", "adagrad", "adam"}
            : std::set<std::string>{"sgd", "adagrad", "rowwise_adagrad", "adam"};
  if (!types.count(out->type)) {
    return Invalid(Join(prefix, "type"),
                   absl::StrCat("unknown optimizer '", out->type, "' (one of ",
                                absl::StrJoin(types, ", "), ")"));
  }
  DLRM_RETURN_IF_ERROR(
      CheckOptimizerValue(Join(prefix, "learning_rate"), out->learning_rate, /*zero_ok=*/false));
  DLRM_RETURN_IF_ERROR(CheckOptimizerValue(Join(prefix, "epsilon"), out->epsilon, false));
  if (!(out->beta1 >= 0 && out->beta1 < 1)) {
    return Invalid(Join(prefix, "beta1"), absl::StrCat("must be in [0, 1), got ", out->beta1));
  }
  if (!(out->beta2 >= 0 && out->beta2 < 1)) {
    return Invalid(Join(prefix, "beta2"), absl::StrCat("must be in [0, 1), got ", out->beta2));
  }
  DLRM_RETURN_IF_ERROR(
      CheckOptimizerValue(Join(prefix, "weight_decay"), out->weight_decay, /*zero_ok=*/true));
  DLRM_RETURN_IF_ERROR(CheckOptimizerValue(Join(prefix, "initial_accumulator"),
                                           out->initial_accumulator, /*zero_ok=*/true));
  // Parameters this type does not read (dense/cpu/cpu_backend.cc, embedding/sparse_optimizer.cc):
  // given with a value other than the default, they look meant, so they are warned about.
  const OptimizerSpec defaults;
  auto unused = [&](const char* key, double value, double default_value, const char* why) {
    if (node[key] && value != default_value) {
      warnings->push_back(absl::StrCat(Join(prefix, key), ": ", value, " is ignored: ", out->type,
                                       " does not use it (", why, ")"));
    }
  };
  if (out->type != "adam") {
    unused("beta1", out->beta1, defaults.beta1, "only adam reads beta1 and beta2");
    unused("beta2", out->beta2, defaults.beta2, "only adam reads beta1 and beta2");
  }
  if (out->type == "sgd") {
    unused("epsilon", out->epsilon, defaults.epsilon, "adagrad and adam read it");
  }
  if (!dense && out->type != "adagrad" && out->type != "rowwise_adagrad") {
    unused("initial_accumulator", out->initial_accumulator, defaults.initial_accumulator,
           "only adagrad and rowwise_adagrad keep an accumulator");
  }
  return absl::OkStatus();
}

absl::Status ReadTables(const YAML::Node& node, std::vector<TableSpec>* out) {
  out->clear();
  if (!node) return Invalid("tables", "missing (a list of {name, rows} or {cardinalities: [...]})");
  if (node.IsSequence()) {
    DLRM_RETURN_IF_ERROR(
        AtMost("tables (count)", static_cast<int64_t>(node.size()), kMaxTables, "kMaxTables"));
    for (size_t i = 0; i < node.size(); ++i) {
      std::string prefix = absl::StrCat("tables[", i, "]");
      DLRM_RETURN_IF_ERROR(CheckKeys(node[i], prefix, {"name", "rows", "dtype", "pooling"}));
      TableSpec t;
      t.name = absl::StrCat("C", i + 1);
      DLRM_RETURN_IF_ERROR(Read(node[i], prefix, "name", &t.name));
      DLRM_RETURN_IF_ERROR(Read(node[i], prefix, "rows", &t.rows));
      DLRM_RETURN_IF_ERROR(Read(node[i], prefix, "dtype", &t.dtype));
      DLRM_RETURN_IF_ERROR(CheckRowDtype(Join(prefix, "dtype"), t.dtype));
      DLRM_RETURN_IF_ERROR(Read(node[i], prefix, "pooling", &t.pooling));
      DLRM_RETURN_IF_ERROR(CheckPooling(Join(prefix, "pooling"), t.pooling));
      if (t.rows <= 0)
        return Invalid(Join(prefix, "rows"), absl::StrCat("must be > 0, got ", t.rows));
      DLRM_RETURN_IF_ERROR(AtMost(Join(prefix, "rows"), t.rows, kMaxTableRows, "kMaxTableRows"));
      DLRM_RETURN_IF_ERROR(CheckText(Join(prefix, "name"), t.name, kMaxNameBytes, "kMaxNameBytes"));
      // Messages, logs and checkpoint manifests name a table by its name: two alike, or none,
      // would leave a user unable to tell which table one means.
      if (t.name.empty()) return Invalid(Join(prefix, "name"), "must not be empty");
      for (size_t j = 0; j < out->size(); ++j) {
        if ((*out)[j].name != t.name) continue;
        const bool defaulted = !node[j]["name"] || !node[i]["name"];
        return Invalid(Join(prefix, "name"),
                       absl::StrCat("'", t.name, "' is also the name of tables[", j,
                                    "]; table names must differ",
                                    defaulted ? " (a table without a name is C and its position "
                                                "from 1)"
                                              : ""));
      }
      out->push_back(t);
    }
  } else {
    DLRM_RETURN_IF_ERROR(
        CheckKeys(node, "tables", {"cardinalities", "max_rows", "dtype", "pooling"}));
    std::string dtype = "fp32", pooling;
    DLRM_RETURN_IF_ERROR(Read(node, "tables", "dtype", &dtype));
    DLRM_RETURN_IF_ERROR(CheckRowDtype("tables.dtype", dtype));
    DLRM_RETURN_IF_ERROR(Read(node, "tables", "pooling", &pooling));
    DLRM_RETURN_IF_ERROR(CheckPooling("tables.pooling", pooling));
    YAML::Node cards = node["cardinalities"];
    if (!cards || !cards.IsSequence()) return Invalid("tables.cardinalities", "must be a list");
    DLRM_RETURN_IF_ERROR(AtMost("tables.cardinalities (count)", static_cast<int64_t>(cards.size()),
                                kMaxTables, "kMaxTables"));
    int64_t max_rows = 0;
    DLRM_RETURN_IF_ERROR(Read(node, "tables", "max_rows", &max_rows));
    if (max_rows < 0) {
      return Invalid("tables.max_rows", absl::StrCat("must be >= 0, got ", max_rows));
    }
    for (size_t i = 0; i < cards.size(); ++i) {
      TableSpec t;
      t.name = absl::StrCat("C", i + 1);
      t.dtype = dtype;
      t.pooling = pooling;
      std::string key = absl::StrCat("tables.cardinalities[", i, "]");
      DLRM_RETURN_IF_ERROR(ReadInteger(cards[i], key, &t.rows));
      if (t.rows <= 0) return Invalid(key, absl::StrCat("must be > 0, got ", t.rows));
      if (max_rows > 0 && t.rows > max_rows) t.rows = max_rows;
      DLRM_RETURN_IF_ERROR(AtMost(key, t.rows, kMaxTableRows, "kMaxTableRows"));
      out->push_back(t);
    }
  }
  if (out->empty()) return Invalid("tables", "at least one table is required");
  return absl::OkStatus();
}

// model: the MLPs, the embedding width, pooling and interaction, checked.
absl::Status ReadModel(const YAML::Node& model, JobSpec* spec) {
  if (!model) return Invalid("model", "missing");
  DLRM_RETURN_IF_ERROR(CheckKeys(model, "model",
                                 {"dense_features", "bottom_mlp", "top_mlp", "embedding_dim",
                                  "pooling", "interaction", "cross_layers", "low_rank"}));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "dense_features", &spec->dense_features));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "embedding_dim", &spec->embedding_dim));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "pooling", &spec->pooling));
  DLRM_RETURN_IF_ERROR(ReadIntList(model, "model", "bottom_mlp", &spec->bottom_mlp));
  DLRM_RETURN_IF_ERROR(ReadIntList(model, "model", "top_mlp", &spec->top_mlp));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "interaction", &spec->interaction));
  if (spec->interaction != "dot" && spec->interaction != "dcnv2") {
    return Invalid("model.interaction",
                   absl::StrCat("must be dot or dcnv2, got '", spec->interaction, "'"));
  }
  if (spec->interaction != "dcnv2" && (model["cross_layers"] || model["low_rank"])) {
    return Invalid(model["cross_layers"] ? "model.cross_layers" : "model.low_rank",
                   "applies to interaction: dcnv2 only");
  }
  DLRM_RETURN_IF_ERROR(Read(model, "model", "cross_layers", &spec->cross_layers));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "low_rank", &spec->low_rank));
  if (spec->cross_layers <= 0) {
    return Invalid("model.cross_layers", absl::StrCat("must be > 0, got ", spec->cross_layers));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("model.cross_layers", spec->cross_layers, kMaxCrossLayers, "kMaxCrossLayers"));
  if (spec->low_rank <= 0) {
    return Invalid("model.low_rank", absl::StrCat("must be > 0, got ", spec->low_rank));
  }
  DLRM_RETURN_IF_ERROR(AtMost("model.low_rank", spec->low_rank, kMaxLowRank, "kMaxLowRank"));
  if (spec->dense_features <= 0) {
    return Invalid("model.dense_features", absl::StrCat("must be > 0, got ", spec->dense_features));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("model.dense_features", spec->dense_features, kMaxDenseFeatures, "kMaxDenseFeatures"));
  if (spec->embedding_dim <= 0) {
    return Invalid("model.embedding_dim", absl::StrCat("must be > 0, got ", spec->embedding_dim));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("model.embedding_dim", spec->embedding_dim, kMaxEmbeddingDim, "kMaxEmbeddingDim"));
  if (spec->pooling != "sum" && spec->pooling != "mean") {
    return Invalid("model.pooling", absl::StrCat("must be sum or mean, got '", spec->pooling, "'"));
  }
  if (spec->bottom_mlp.empty()) return Invalid("model.bottom_mlp", "missing or empty");
  if (spec->top_mlp.empty()) return Invalid("model.top_mlp", "missing or empty");
  if (spec->bottom_mlp.back() != spec->embedding_dim) {
    return Invalid(
        "model.bottom_mlp",
        absl::StrCat("last width ", spec->bottom_mlp.back(), " must equal model.embedding_dim ",
                     spec->embedding_dim, " (the interaction stacks equal widths)"));
  }
  if (spec->top_mlp.back() != 1) {
    return Invalid("model.top_mlp",
                   absl::StrCat("last width must be 1 (one logit), got ", spec->top_mlp.back()));
  }
  return absl::OkStatus();
}

// training: batch, epochs, steps, hot rows, device, sync formats and evaluation, checked (also
// when the section is missing: the defaults, against the model's size).
absl::Status ReadTraining(const YAML::Node& tr, JobSpec* spec) {
  if (tr) {
    DLRM_RETURN_IF_ERROR(CheckKeys(
        tr, "training",
        {"batch_size", "epochs", "seed", "max_steps", "staleness", "hot_budget",
         "hot_sample_batches", "hot_refresh_steps", "device", "math_mode", "eval_every_steps",
         "target_auc", "max_recoveries", "network_gbps", "hot_sync_dtype", "dense_sync_dtype",
         "dense_sync_compression", "powersgd_rank", "powersgd_warmup_steps"}));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "batch_size", &spec->batch_size));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "epochs", &spec->epochs));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "seed", &spec->seed));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "max_steps", &spec->max_steps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "staleness", &spec->staleness));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_sample_batches", &spec->hot_sample_batches));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_refresh_steps", &spec->hot_refresh_steps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "device", &spec->device));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "math_mode", &spec->math_mode));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "eval_every_steps", &spec->eval_every_steps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "target_auc", &spec->target_auc));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "max_recoveries", &spec->max_recoveries));
    std::string hot_budget;
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_budget", &hot_budget));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "network_gbps", &spec->network_gbps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_sync_dtype", &spec->hot_sync_dtype));
    // A table dtype, or fp8: a format of the wire only.
    if (!spec->hot_sync_dtype.empty() && spec->hot_sync_dtype != "fp8" &&
        !CheckRowDtype("training.hot_sync_dtype", spec->hot_sync_dtype).ok()) {
      return Invalid(
          "training.hot_sync_dtype",
          absl::StrCat("'", spec->hot_sync_dtype, "' is not one of fp32, fp16, bf16, fp8"));
    }
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "dense_sync_dtype", &spec->dense_sync_dtype));
    if (spec->dense_sync_dtype != "fp32" && spec->dense_sync_dtype != "bf16") {
      return Invalid("training.dense_sync_dtype",
                     absl::StrCat("'", spec->dense_sync_dtype, "' is not fp32 or bf16",
                                  spec->dense_sync_dtype == "fp16"
                                      ? " (fp16 would flush dense gradients below 2^-24 to zero)"
                                      : ""));
    }
    DLRM_RETURN_IF_ERROR(
        Read(tr, "training", "dense_sync_compression", &spec->dense_sync_compression));
    if (spec->dense_sync_compression != "none" && spec->dense_sync_compression != "powersgd") {
      return Invalid("training.dense_sync_compression",
                     absl::StrCat("'", spec->dense_sync_compression, "' is not none or powersgd"));
    }
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "powersgd_rank", &spec->powersgd_rank));
    if (spec->powersgd_rank < 1 || spec->powersgd_rank > 64) {
      return Invalid("training.powersgd_rank",
                     absl::StrCat(spec->powersgd_rank, " is not in [1, 64]"));
    }
    DLRM_RETURN_IF_ERROR(
        Read(tr, "training", "powersgd_warmup_steps", &spec->powersgd_warmup_steps));
    if (spec->powersgd_warmup_steps < 0) {
      return Invalid("training.powersgd_warmup_steps",
                     absl::StrCat(spec->powersgd_warmup_steps, " is negative"));
    }
    if (spec->dense_sync_compression == "powersgd" && spec->dense_sync_dtype != "fp32") {
      return Invalid("training.dense_sync_compression",
                     absl::StrCat("powersgd sends its factors in fp32; dense_sync_dtype is '",
                                  spec->dense_sync_dtype, "'"));
    }
    if (hot_budget == "auto") {
      spec->hot_budget_bytes = JobSpec::kHotBudgetAuto;
    } else if (!hot_budget.empty()) {
      auto bytes = ParseByteSize(hot_budget);
      if (!bytes.ok()) return Invalid("training.hot_budget", std::string(bytes.status().message()));
      spec->hot_budget_bytes = *bytes;
    }
  }
  if (spec->batch_size <= 0) {
    return Invalid("training.batch_size", absl::StrCat("must be > 0, got ", spec->batch_size));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("training.batch_size", spec->batch_size, kMaxBatchSize, "kMaxBatchSize"));
  if (spec->epochs <= 0) {
    return Invalid("training.epochs", absl::StrCat("must be > 0, got ", spec->epochs));
  }
  DLRM_RETURN_IF_ERROR(AtMost("training.epochs", spec->epochs, kMaxEpochs, "kMaxEpochs"));
  if (spec->max_steps < 0) {
    return Invalid("training.max_steps", absl::StrCat("must be >= 0, got ", spec->max_steps));
  }
  if (spec->staleness < 0) {
    return Invalid("training.staleness", absl::StrCat("must be >= 0, got ", spec->staleness));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("training.staleness", spec->staleness, kMaxStaleness, "kMaxStaleness"));
  if (spec->hot_sample_batches <= 0) {
    return Invalid("training.hot_sample_batches",
                   absl::StrCat("must be > 0, got ", spec->hot_sample_batches));
  }
  DLRM_RETURN_IF_ERROR(AtMost("training.hot_sample_batches", spec->hot_sample_batches,
                              kMaxHotSampleBatches, "kMaxHotSampleBatches"));
  if (!std::isfinite(spec->network_gbps) || spec->network_gbps <= 0 || spec->network_gbps > 1e4) {
    return Invalid("training.network_gbps",
                   absl::StrCat("must be in (0, 10000] Gbit/s, got ", spec->network_gbps));
  }
  if (spec->hot_refresh_steps < 0) {
    return Invalid("training.hot_refresh_steps",
                   absl::StrCat("must be >= 0, got ", spec->hot_refresh_steps));
  }
  if (spec->max_recoveries < 0) {
    return Invalid("training.max_recoveries",
                   absl::StrCat("must be >= 0, got ", spec->max_recoveries));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("training.max_recoveries", spec->max_recoveries, kMaxRecoveries, "kMaxRecoveries"));
  DLRM_RETURN_IF_ERROR(CheckModelSize(*spec));
  if (spec->eval_every_steps < 0) {
    return Invalid("training.eval_every_steps",
                   absl::StrCat("must be >= 0, got ", spec->eval_every_steps));
  }
  if (!std::isfinite(spec->target_auc) || spec->target_auc < 0 || spec->target_auc >= 1) {
    return Invalid("training.target_auc",
                   absl::StrCat("must be in [0, 1) (0 = no target), got ", spec->target_auc));
  }
  if (spec->target_auc > 0 && spec->eval_every_steps == 0) {
    return Invalid("training.target_auc",
                   absl::StrCat(spec->target_auc,
                                " needs training.eval_every_steps: the target is checked at each "
                                "periodic evaluation"));
  }
  if (spec->device != "auto" && spec->device != "cpu" && spec->device != "cuda") {
    return Invalid("training.device",
                   absl::StrCat("must be auto, cpu or cuda, got '", spec->device, "'"));
  }
  if (spec->math_mode != "fp32" && spec->math_mode != "tf32" && spec->math_mode != "bf16") {
    return Invalid("training.math_mode",
                   absl::StrCat("must be fp32, tf32 or bf16, got '", spec->math_mode, "'"));
  }
  return absl::OkStatus();
}

// checkpoint: the folder, how often, how many kept, resume_from.
absl::Status ReadCheckpoint(const YAML::Node& ck, JobSpec* spec) {
  if (ck) {
    DLRM_RETURN_IF_ERROR(CheckKeys(
        ck, "checkpoint",
        {"dir", "every_steps", "every_seconds", "keep_last", "full_every", "resume_from"}));
    CheckpointSpec& c = spec->checkpoint;
    DLRM_RETURN_IF_ERROR(Read(ck, "checkpoint", "dir", &c.dir));
    DLRM_RETURN_IF_ERROR(Read(ck, "checkpoint", "every_steps", &c.every_steps));
    DLRM_RETURN_IF_ERROR(Read(ck, "checkpoint", "every_seconds", &c.every_seconds));
    DLRM_RETURN_IF_ERROR(Read(ck, "checkpoint", "keep_last", &c.keep_last));
    DLRM_RETURN_IF_ERROR(Read(ck, "checkpoint", "full_every", &c.full_every));
    DLRM_RETURN_IF_ERROR(Read(ck, "checkpoint", "resume_from", &c.resume_from));
    DLRM_RETURN_IF_ERROR(CheckText("checkpoint.dir", c.dir, kMaxPathBytes, "kMaxPathBytes"));
    DLRM_RETURN_IF_ERROR(
        CheckText("checkpoint.resume_from", c.resume_from, kMaxPathBytes, "kMaxPathBytes"));
    if (c.every_steps < 0) {
      return Invalid("checkpoint.every_steps", absl::StrCat("must be >= 0, got ", c.every_steps));
    }
    if (!(c.every_seconds >= 0) || c.every_seconds > 1e9) {
      return Invalid("checkpoint.every_seconds",
                     absl::StrCat("must be in [0, 1e9], got ", c.every_seconds));
    }
    if (c.keep_last < 1 || c.keep_last > 1000) {
      return Invalid("checkpoint.keep_last",
                     absl::StrCat("must be in [1, 1000], got ", c.keep_last));
    }
    if (c.full_every < 1 || c.full_every > 1000) {
      return Invalid("checkpoint.full_every",
                     absl::StrCat("must be in [1, 1000], got ", c.full_every));
    }
    if (c.dir.empty() && (c.every_steps > 0 || c.every_seconds > 0)) {
      return Invalid("checkpoint.dir", "required when every_steps or every_seconds is set");
    }
    const std::filesystem::path dir(c.dir);
    if (dir.is_absolute() && std::find(dir.begin(), dir.end(), "..") != dir.end()) {
      // A parameter server refuses it at the job's first checkpoint (through a symbolic link,
      // ".." is not the folder it reads as): refused here, before the job trains.
      return Invalid("checkpoint.dir", absl::StrCat(c.dir,
                                                    " has a '..' component; give the folder "
                                                    "without it"));
    }
    if (!c.dir.empty() && dir.lexically_normal() == "/") {
      // Checkpoints would be written into /, and keep_last would remove its ckpt-* folders.
      return Invalid("checkpoint.dir", absl::StrCat(c.dir,
                                                    " is the filesystem's root; give the job a "
                                                    "folder of its own"));
    }
  }
  return absl::OkStatus();
}

// data: the files, their format and the eval split.
absl::Status ReadData(const YAML::Node& data, JobSpec* spec, std::vector<std::string>* warnings) {
  if (data) {
    DLRM_RETURN_IF_ERROR(
        CheckKeys(data, "data", {"train", "eval", "format", "eval_fraction", "strict"}));
    DLRM_RETURN_IF_ERROR(ReadPaths(data, "data", "train", &spec->train_paths));
    DLRM_RETURN_IF_ERROR(ReadPaths(data, "data", "eval", &spec->eval_paths));
    DLRM_RETURN_IF_ERROR(Read(data, "data", "format", &spec->format));
    DLRM_RETURN_IF_ERROR(Read(data, "data", "eval_fraction", &spec->eval_fraction));
    DLRM_RETURN_IF_ERROR(Read(data, "data", "strict", &spec->strict));
  }
  if (spec->format != "auto" && spec->format != "tsv" && spec->format != "binary") {
    return Invalid("data.format",
                   absl::StrCat("must be auto, tsv or binary, got '", spec->format, "'"));
  }
  if (!(spec->eval_fraction >= 0 && spec->eval_fraction < 1)) {
    return Invalid("data.eval_fraction",
                   absl::StrCat("must be in [0, 1), got ", spec->eval_fraction));
  }
  if (data && data["eval_fraction"] && !spec->eval_paths.empty() &&
      spec->eval_fraction != JobSpec().eval_fraction) {
    warnings->push_back(absl::StrCat(
        "data.eval_fraction: ", spec->eval_fraction,
        " is ignored: data.eval is given, so the job evaluates on it and holds out none of "
        "data.train"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> ParseNode(const YAML::Node& root, std::vector<std::string>* warnings) {
  JobSpec spec;
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.001};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.05};
  DLRM_RETURN_IF_ERROR(CheckKeys(
      root, "", {"name", "model", "tables", "optimizer", "training", "data", "checkpoint"}));
  DLRM_RETURN_IF_ERROR(Read(root, "", "name", &spec.name));
  DLRM_RETURN_IF_ERROR(CheckText("name", spec.name, kMaxNameBytes, "kMaxNameBytes"));

  DLRM_RETURN_IF_ERROR(ReadModel(root["model"], &spec));
  DLRM_RETURN_IF_ERROR(ReadTables(root["tables"], &spec.tables));

  if (YAML::Node opt = root["optimizer"]) {
    DLRM_RETURN_IF_ERROR(CheckKeys(opt, "optimizer", {"dense", "sparse", "schedule"}));
    DLRM_RETURN_IF_ERROR(
        ReadOptimizer(opt["dense"], "optimizer.dense", true, &spec.dense_optimizer, warnings));
    DLRM_RETURN_IF_ERROR(
        ReadOptimizer(opt["sparse"], "optimizer.sparse", false, &spec.sparse_optimizer, warnings));
    DLRM_RETURN_IF_ERROR(ReadSchedule(opt["schedule"], &spec.lr_schedule));
  }

  DLRM_RETURN_IF_ERROR(ReadTraining(root["training"], &spec));
  DLRM_RETURN_IF_ERROR(ReadCheckpoint(root["checkpoint"], &spec));
  DLRM_RETURN_IF_ERROR(ReadData(root["data"], &spec, warnings));
  // A rank at or past the cross layers' width is no low-rank layer: U_l V_l reaches no higher
  // rank than a full matrix, with more weights (the default 512 does this to a small model).
  const int width = spec.TopInputWidth();
  if (spec.interaction == "dcnv2" && spec.low_rank >= width) {
    warnings->push_back(absl::StrCat(
        "model.low_rank: ", spec.low_rank, " is not below the width of the cross layers, ", width,
        " ((", spec.tables.size(), " tables + 1) x embedding_dim ", spec.embedding_dim,
        "): each layer's U (", width, " x ", spec.low_rank, ") and V (", spec.low_rank, " x ",
        width, ") reach no higher rank than one ", width, " x ", width,
        " matrix and hold more weights; give a low_rank below ", width));
  }
  return spec;
}

}  // namespace dlrm::common::job_spec_internal
