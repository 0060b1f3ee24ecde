#include "common/job_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/limits.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::common {
namespace {

absl::Status Invalid(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
}

// INVALID_ARGUMENT naming `key`, the value and the limit when value > limit.
absl::Status AtMost(const std::string& key, int64_t value, int64_t limit, const char* limit_name) {
  if (value <= limit) return absl::OkStatus();
  return Invalid(key, absl::StrCat(value, " is over the limit of ", limit, " (", limit_name,
                                   " in common/limits.h)"));
}

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
size_t Utf8SequenceLength(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, cp = lead & 0x07;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  const bool surrogate = cp >= 0xd800 && cp <= 0xdfff;
  return overlong || surrogate || cp > 0x10ffff ? 0 : n;
}

// Text a user wrote (a name, a path): at most `limit` bytes of valid UTF-8 without control
// characters, so that it prints, logs and round-trips through YAML as it was given.
absl::Status CheckText(const std::string& key, const std::string& text, int64_t limit,
                       const char* limit_name) {
  if (static_cast<int64_t>(text.size()) > limit) {
    return Invalid(key, absl::StrCat("length ", text.size(), " bytes is over the limit of ", limit,
                                     " (", limit_name, " in common/limits.h)"));
  }
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      return Invalid(
          key, absl::StrCat("control character 0x", absl::Hex(c, absl::kZeroPad2), " at byte ", i));
    }
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return Invalid(key, absl::StrCat("not valid UTF-8 at byte ", i));
    i += n;
  }
  return absl::OkStatus();
}

// A finite floating-point value in (0, kMaxOptimizerValue], or [0, kMaxOptimizerValue] when
// `zero_ok`. NaN and infinities are refused (they would poison every weight they touch).
absl::Status CheckOptimizerValue(const std::string& key, double value, bool zero_ok) {
  const bool low_ok = zero_ok ? value >= 0 : value > 0;
  if (low_ok && value <= kMaxOptimizerValue) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be a finite number in ", zero_ok ? "[0, " : "(0, ",
                                   static_cast<int64_t>(kMaxOptimizerValue),
                                   "] (kMaxOptimizerValue in common/limits.h), got ", value));
}

// Refuses keys of `node` that are not in `allowed`, naming the full dotted key.
absl::Status CheckKeys(const YAML::Node& node, const std::string& prefix,
                       const std::set<std::string>& allowed) {
  if (!node.IsMap()) return Invalid(prefix, "must be a mapping");
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string full = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key '", full, "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

template <typename T>
absl::Status Read(const YAML::Node& parent, const std::string& prefix, const std::string& key,
                  T* out) {
  YAML::Node node = parent[key];
  if (!node) return absl::OkStatus();
  try {
    *out = node.as<T>();
  } catch (const YAML::Exception&) {
    return Invalid(Join(prefix, key), absl::StrCat("cannot read '", YAML::Dump(node), "' as ",
                                                   std::is_same_v<T, std::string> ? "a string"
                                                   : std::is_floating_point_v<T>  ? "a number"
                                                   : std::is_same_v<T, bool>      ? "a boolean"
                                                                                  : "an integer"));
  }
  return absl::OkStatus();
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
    try {
      v = node[i].as<int>();
    } catch (const YAML::Exception&) {
      return Invalid(absl::StrCat(Join(prefix, key), "[", i, "]"),
                     absl::StrCat("cannot read '", YAML::Dump(node[i]), "' as an integer"));
    }
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
  if (node.IsScalar()) {
    out->push_back(node.as<std::string>());
    return CheckText(Join(prefix, key), out->back(), kMaxPathBytes, "kMaxPathBytes");
  }
  if (!node.IsSequence()) return Invalid(Join(prefix, key), "must be a path or a list of paths");
  for (const auto& item : node) {
    out->push_back(item.as<std::string>());
    DLRM_RETURN_IF_ERROR(CheckText(absl::StrCat(Join(prefix, key), "[", out->size() - 1, "]"),
                                   out->back(), kMaxPathBytes, "kMaxPathBytes"));
  }
  return absl::OkStatus();
}

absl::Status ReadOptimizer(const YAML::Node& node, const std::string& prefix, bool dense,
                           OptimizerSpec* out) {
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
  return absl::OkStatus();
}

// A table's own pooling: "" (model.pooling's), sum or mean.
absl::Status CheckPooling(const std::string& key, const std::string& pooling) {
  if (pooling.empty() || pooling == "sum" || pooling == "mean") return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be sum or mean, got '", pooling, "'"));
}

// The names embedding/row_dtype.h parses (common/ does not depend on embedding/).
absl::Status CheckRowDtype(const std::string& key, const std::string& dtype) {
  if (dtype == "fp32" || dtype == "fp16" || dtype == "bf16") return absl::OkStatus();
  return Invalid(key, absl::StrCat("'", dtype, "' is not one of fp32, fp16, bf16"));
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
      try {
        t.rows = cards[i].as<int64_t>();
      } catch (const YAML::Exception&) {
        return Invalid(key, absl::StrCat("cannot read '", YAML::Dump(cards[i]), "' as an integer"));
      }
      if (t.rows <= 0) return Invalid(key, absl::StrCat("must be > 0, got ", t.rows));
      if (max_rows > 0 && t.rows > max_rows) t.rows = max_rows;
      DLRM_RETURN_IF_ERROR(AtMost(key, t.rows, kMaxTableRows, "kMaxTableRows"));
      out->push_back(t);
    }
  }
  if (out->empty()) return Invalid("tables", "at least one table is required");
  return absl::OkStatus();
}

// What the model costs a worker, in int64 so that no product overflows (every factor is limited
// already): the dense parameters, and the largest activation of one batch.
absl::Status CheckModelSize(const JobSpec& spec) {
  int64_t params = 0;
  int64_t widest = spec.dense_features;
  auto mlp = [&params, &widest](int64_t in, const std::vector<int>& widths) {
    for (int w : widths) {
      params += in * w + w;
      widest = std::max<int64_t>(widest, w);
      in = w;
    }
  };
  const int64_t top_input = spec.TopInputWidth();
  mlp(spec.dense_features, spec.bottom_mlp);
  mlp(top_input, spec.top_mlp);
  const int64_t tables = static_cast<int64_t>(spec.tables.size());
  widest = std::max({widest, top_input, (tables + 1) * spec.embedding_dim});
  if (spec.interaction == "dcnv2") {
    // Each cross layer: V [rank x width], U [width x rank], b [width].
    params += spec.cross_layers * (2 * spec.low_rank * top_input + top_input);
    widest = std::max<int64_t>(widest, spec.low_rank);
  }
  if (params > kMaxDenseParameters) {
    return Invalid("model",
                   absl::StrCat("the MLPs have ", params, " parameters, over the limit of ",
                                kMaxDenseParameters, " (kMaxDenseParameters in common/limits.h)"));
  }
  const int64_t activation = widest * spec.batch_size;
  if (activation > kMaxActivationElements) {
    return Invalid(
        "training.batch_size",
        absl::StrCat("batch_size ", spec.batch_size, " x the widest layer ", widest, " = ",
                     activation, " floats per activation, over the limit of ",
                     kMaxActivationElements, " (kMaxActivationElements in common/limits.h)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSpec> ParseNode(const YAML::Node& root) {
  JobSpec spec;
  spec.dense_optimizer = {.type = "adam", .learning_rate = 0.001};
  spec.sparse_optimizer = {.type = "rowwise_adagrad", .learning_rate = 0.05};
  DLRM_RETURN_IF_ERROR(CheckKeys(
      root, "", {"name", "model", "tables", "optimizer", "training", "data", "checkpoint"}));
  DLRM_RETURN_IF_ERROR(Read(root, "", "name", &spec.name));
  DLRM_RETURN_IF_ERROR(CheckText("name", spec.name, kMaxNameBytes, "kMaxNameBytes"));

  YAML::Node model = root["model"];
  if (!model) return Invalid("model", "missing");
  DLRM_RETURN_IF_ERROR(CheckKeys(model, "model",
                                 {"dense_features", "bottom_mlp", "top_mlp", "embedding_dim",
                                  "pooling", "interaction", "cross_layers", "low_rank"}));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "dense_features", &spec.dense_features));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "embedding_dim", &spec.embedding_dim));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "pooling", &spec.pooling));
  DLRM_RETURN_IF_ERROR(ReadIntList(model, "model", "bottom_mlp", &spec.bottom_mlp));
  DLRM_RETURN_IF_ERROR(ReadIntList(model, "model", "top_mlp", &spec.top_mlp));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "interaction", &spec.interaction));
  if (spec.interaction != "dot" && spec.interaction != "dcnv2") {
    return Invalid("model.interaction",
                   absl::StrCat("must be dot or dcnv2, got '", spec.interaction, "'"));
  }
  if (spec.interaction != "dcnv2" && (model["cross_layers"] || model["low_rank"])) {
    return Invalid(model["cross_layers"] ? "model.cross_layers" : "model.low_rank",
                   "applies to interaction: dcnv2 only");
  }
  DLRM_RETURN_IF_ERROR(Read(model, "model", "cross_layers", &spec.cross_layers));
  DLRM_RETURN_IF_ERROR(Read(model, "model", "low_rank", &spec.low_rank));
  if (spec.cross_layers <= 0) {
    return Invalid("model.cross_layers", absl::StrCat("must be > 0, got ", spec.cross_layers));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("model.cross_layers", spec.cross_layers, kMaxCrossLayers, "kMaxCrossLayers"));
  if (spec.low_rank <= 0) {
    return Invalid("model.low_rank", absl::StrCat("must be > 0, got ", spec.low_rank));
  }
  DLRM_RETURN_IF_ERROR(AtMost("model.low_rank", spec.low_rank, kMaxLowRank, "kMaxLowRank"));
  if (spec.dense_features <= 0) {
    return Invalid("model.dense_features", absl::StrCat("must be > 0, got ", spec.dense_features));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("model.dense_features", spec.dense_features, kMaxDenseFeatures, "kMaxDenseFeatures"));
  if (spec.embedding_dim <= 0) {
    return Invalid("model.embedding_dim", absl::StrCat("must be > 0, got ", spec.embedding_dim));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("model.embedding_dim", spec.embedding_dim, kMaxEmbeddingDim, "kMaxEmbeddingDim"));
  if (spec.pooling != "sum" && spec.pooling != "mean") {
    return Invalid("model.pooling", absl::StrCat("must be sum or mean, got '", spec.pooling, "'"));
  }
  if (spec.bottom_mlp.empty()) return Invalid("model.bottom_mlp", "missing or empty");
  if (spec.top_mlp.empty()) return Invalid("model.top_mlp", "missing or empty");
  if (spec.bottom_mlp.back() != spec.embedding_dim) {
    return Invalid(
        "model.bottom_mlp",
        absl::StrCat("last width ", spec.bottom_mlp.back(), " must equal model.embedding_dim ",
                     spec.embedding_dim, " (the interaction stacks equal widths)"));
  }
  if (spec.top_mlp.back() != 1) {
    return Invalid("model.top_mlp",
                   absl::StrCat("last width must be 1 (one logit), got ", spec.top_mlp.back()));
  }

  DLRM_RETURN_IF_ERROR(ReadTables(root["tables"], &spec.tables));

  if (YAML::Node opt = root["optimizer"]) {
    DLRM_RETURN_IF_ERROR(CheckKeys(opt, "optimizer", {"dense", "sparse"}));
    DLRM_RETURN_IF_ERROR(
        ReadOptimizer(opt["dense"], "optimizer.dense", true, &spec.dense_optimizer));
    DLRM_RETURN_IF_ERROR(
        ReadOptimizer(opt["sparse"], "optimizer.sparse", false, &spec.sparse_optimizer));
  }

  if (YAML::Node tr = root["training"]) {
    DLRM_RETURN_IF_ERROR(
        CheckKeys(tr, "training",
                  {"batch_size", "epochs", "seed", "max_steps", "staleness", "hot_budget",
                   "hot_sample_batches", "hot_refresh_steps", "device", "math_mode",
                   "eval_every_steps", "max_recoveries", "network_gbps"}));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "batch_size", &spec.batch_size));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "epochs", &spec.epochs));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "seed", &spec.seed));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "max_steps", &spec.max_steps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "staleness", &spec.staleness));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_sample_batches", &spec.hot_sample_batches));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_refresh_steps", &spec.hot_refresh_steps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "device", &spec.device));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "math_mode", &spec.math_mode));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "eval_every_steps", &spec.eval_every_steps));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "max_recoveries", &spec.max_recoveries));
    std::string hot_budget;
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "hot_budget", &hot_budget));
    DLRM_RETURN_IF_ERROR(Read(tr, "training", "network_gbps", &spec.network_gbps));
    if (hot_budget == "auto") {
      spec.hot_budget_bytes = JobSpec::kHotBudgetAuto;
    } else if (!hot_budget.empty()) {
      auto bytes = ParseByteSize(hot_budget);
      if (!bytes.ok()) return Invalid("training.hot_budget", std::string(bytes.status().message()));
      spec.hot_budget_bytes = *bytes;
    }
  }
  if (spec.batch_size <= 0) {
    return Invalid("training.batch_size", absl::StrCat("must be > 0, got ", spec.batch_size));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("training.batch_size", spec.batch_size, kMaxBatchSize, "kMaxBatchSize"));
  if (spec.epochs <= 0) {
    return Invalid("training.epochs", absl::StrCat("must be > 0, got ", spec.epochs));
  }
  DLRM_RETURN_IF_ERROR(AtMost("training.epochs", spec.epochs, kMaxEpochs, "kMaxEpochs"));
  if (spec.max_steps < 0) {
    return Invalid("training.max_steps", absl::StrCat("must be >= 0, got ", spec.max_steps));
  }
  if (spec.staleness < 0) {
    return Invalid("training.staleness", absl::StrCat("must be >= 0, got ", spec.staleness));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("training.staleness", spec.staleness, kMaxStaleness, "kMaxStaleness"));
  if (spec.hot_sample_batches <= 0) {
    return Invalid("training.hot_sample_batches",
                   absl::StrCat("must be > 0, got ", spec.hot_sample_batches));
  }
  DLRM_RETURN_IF_ERROR(AtMost("training.hot_sample_batches", spec.hot_sample_batches,
                              kMaxHotSampleBatches, "kMaxHotSampleBatches"));
  if (!std::isfinite(spec.network_gbps) || spec.network_gbps <= 0 || spec.network_gbps > 1e4) {
    return Invalid("training.network_gbps",
                   absl::StrCat("must be in (0, 10000] Gbit/s, got ", spec.network_gbps));
  }
  if (spec.hot_refresh_steps < 0) {
    return Invalid("training.hot_refresh_steps",
                   absl::StrCat("must be >= 0, got ", spec.hot_refresh_steps));
  }
  if (spec.max_recoveries < 0) {
    return Invalid("training.max_recoveries",
                   absl::StrCat("must be >= 0, got ", spec.max_recoveries));
  }
  DLRM_RETURN_IF_ERROR(
      AtMost("training.max_recoveries", spec.max_recoveries, kMaxRecoveries, "kMaxRecoveries"));
  DLRM_RETURN_IF_ERROR(CheckModelSize(spec));
  if (spec.eval_every_steps < 0) {
    return Invalid("training.eval_every_steps",
                   absl::StrCat("must be >= 0, got ", spec.eval_every_steps));
  }
  if (spec.device != "auto" && spec.device != "cpu" && spec.device != "cuda") {
    return Invalid("training.device",
                   absl::StrCat("must be auto, cpu or cuda, got '", spec.device, "'"));
  }
  if (spec.math_mode != "fp32" && spec.math_mode != "tf32" && spec.math_mode != "bf16") {
    return Invalid("training.math_mode",
                   absl::StrCat("must be fp32, tf32 or bf16, got '", spec.math_mode, "'"));
  }

  if (YAML::Node ck = root["checkpoint"]) {
    DLRM_RETURN_IF_ERROR(CheckKeys(
        ck, "checkpoint",
        {"dir", "every_steps", "every_seconds", "keep_last", "full_every", "resume_from"}));
    CheckpointSpec& c = spec.checkpoint;
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
  }

  if (YAML::Node data = root["data"]) {
    DLRM_RETURN_IF_ERROR(
        CheckKeys(data, "data", {"train", "eval", "format", "eval_fraction", "strict"}));
    DLRM_RETURN_IF_ERROR(ReadPaths(data, "data", "train", &spec.train_paths));
    DLRM_RETURN_IF_ERROR(ReadPaths(data, "data", "eval", &spec.eval_paths));
    DLRM_RETURN_IF_ERROR(Read(data, "data", "format", &spec.format));
    DLRM_RETURN_IF_ERROR(Read(data, "data", "eval_fraction", &spec.eval_fraction));
    DLRM_RETURN_IF_ERROR(Read(data, "data", "strict", &spec.strict));
  }
  if (spec.format != "auto" && spec.format != "tsv" && spec.format != "binary") {
    return Invalid("data.format",
                   absl::StrCat("must be auto, tsv or binary, got '", spec.format, "'"));
  }
  if (!(spec.eval_fraction >= 0 && spec.eval_fraction < 1)) {
    return Invalid("data.eval_fraction",
                   absl::StrCat("must be in [0, 1), got ", spec.eval_fraction));
  }
  return spec;
}

}  // namespace

int JobSpec::TopInputWidth() const {
  int t = static_cast<int>(tables.size());
  return interaction == "dcnv2" ? (t + 1) * embedding_dim : embedding_dim + (t + 1) * t / 2;
}

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& source) {
  if (static_cast<int64_t>(yaml_text.size()) > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": job spec of ", yaml_text.size(),
                                                   " bytes is over the limit of ", kMaxSpecBytes,
                                                   " bytes (kMaxSpecBytes in common/limits.h)"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid YAML: ", e.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": a job spec must be a YAML mapping"));
  }
  try {
    auto spec = ParseNode(root);
    if (!spec.ok()) return Annotate(spec.status(), source);
    return spec;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
}

absl::StatusOr<int> WorkerBatchSize(const JobSpec& spec, int workers) {
  if (workers <= 0) return absl::InvalidArgumentError(absl::StrCat("workers ", workers, " <= 0"));
  if (spec.batch_size % workers != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.batch_size ", spec.batch_size, " is not a multiple of the ", workers,
                     " workers: the global batch is split evenly across them (",
                     spec.batch_size / workers * workers, " or ",
                     (spec.batch_size / workers + 1) * workers, " would do)"));
  }
  return spec.batch_size / workers;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job spec '", path, "'"));
  // Read at most one byte past the limit, so that a huge file (or a device that never ends) is
  // never read whole.
  std::string text(static_cast<size_t>(kMaxSpecBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading job spec '", path, "'"));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat("job spec '", path, "' is over the limit of ",
                                                   kMaxSpecBytes,
                                                   " bytes (kMaxSpecBytes in common/limits.h)"));
  }
  DLRM_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(text, path));
  // Relative data paths are relative to the spec file, so a spec travels with its data.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  auto resolve = [&dir](std::vector<std::string>* paths) {
    for (std::string& p : *paths) {
      if (!p.empty() && std::filesystem::path(p).is_relative()) p = (dir / p).lexically_normal();
    }
  };
  resolve(&spec.train_paths);
  resolve(&spec.eval_paths);
  std::vector<std::string> checkpoint_dirs = {spec.checkpoint.dir, spec.checkpoint.resume_from};
  resolve(&checkpoint_dirs);
  spec.checkpoint.dir = checkpoint_dirs[0];
  spec.checkpoint.resume_from = checkpoint_dirs[1];
  return spec;
}

std::string JobSpecToYaml(const JobSpec& spec) {
  YAML::Emitter out;
  auto optimizer = [&out](const OptimizerSpec& o, bool dense) {
    out << YAML::BeginMap << YAML::Key << "type" << YAML::Value << o.type << YAML::Key
        << "learning_rate" << YAML::Value << o.learning_rate << YAML::Key << "epsilon"
        << YAML::Value << o.epsilon << YAML::Key << "beta1" << YAML::Value << o.beta1 << YAML::Key
        << "beta2" << YAML::Value << o.beta2;
    if (dense) {
      out << YAML::Key << "weight_decay" << YAML::Value << o.weight_decay;
    } else {
      out << YAML::Key << "initial_accumulator" << YAML::Value << o.initial_accumulator;
    }
    out << YAML::EndMap;
  };
  out.SetDoublePrecision(17);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << spec.name;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dense_features" << YAML::Value << spec.dense_features;
  out << YAML::Key << "bottom_mlp" << YAML::Value << YAML::Flow << spec.bottom_mlp;
  out << YAML::Key << "top_mlp" << YAML::Value << YAML::Flow << spec.top_mlp;
  out << YAML::Key << "embedding_dim" << YAML::Value << spec.embedding_dim;
  out << YAML::Key << "pooling" << YAML::Value << spec.pooling;
  out << YAML::Key << "interaction" << YAML::Value << spec.interaction;
  if (spec.interaction == "dcnv2") {
    out << YAML::Key << "cross_layers" << YAML::Value << spec.cross_layers;
    out << YAML::Key << "low_rank" << YAML::Value << spec.low_rank;
  }
  out << YAML::EndMap;
  out << YAML::Key << "tables" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : spec.tables) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << t.name << YAML::Key
        << "rows" << YAML::Value << t.rows;
    if (t.dtype != "fp32") out << YAML::Key << "dtype" << YAML::Value << t.dtype;
    if (!t.pooling.empty()) out << YAML::Key << "pooling" << YAML::Value << t.pooling;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dense" << YAML::Value;
  optimizer(spec.dense_optimizer, true);
  out << YAML::Key << "sparse" << YAML::Value;
  optimizer(spec.sparse_optimizer, false);
  out << YAML::EndMap;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "batch_size" << YAML::Value << spec.batch_size;
  out << YAML::Key << "epochs" << YAML::Value << spec.epochs;
  out << YAML::Key << "seed" << YAML::Value << spec.seed;
  out << YAML::Key << "max_steps" << YAML::Value << spec.max_steps;
  out << YAML::Key << "staleness" << YAML::Value << spec.staleness;
  out << YAML::Key << "hot_budget" << YAML::Value
      << (spec.hot_budget_bytes == JobSpec::kHotBudgetAuto ? std::string("auto")
                                                           : std::to_string(spec.hot_budget_bytes));
  out << YAML::Key << "network_gbps" << YAML::Value << spec.network_gbps;
  out << YAML::Key << "hot_sample_batches" << YAML::Value << spec.hot_sample_batches;
  out << YAML::Key << "hot_refresh_steps" << YAML::Value << spec.hot_refresh_steps;
  out << YAML::Key << "device" << YAML::Value << spec.device;
  out << YAML::Key << "math_mode" << YAML::Value << spec.math_mode;
  out << YAML::Key << "eval_every_steps" << YAML::Value << spec.eval_every_steps;
  out << YAML::Key << "max_recoveries" << YAML::Value << spec.max_recoveries;
  out << YAML::EndMap;
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "train" << YAML::Value << YAML::Flow << spec.train_paths;
  out << YAML::Key << "eval" << YAML::Value << YAML::Flow << spec.eval_paths;
  out << YAML::Key << "format" << YAML::Value << spec.format;
  out << YAML::Key << "eval_fraction" << YAML::Value << spec.eval_fraction;
  out << YAML::Key << "strict" << YAML::Value << spec.strict;
  out << YAML::EndMap;
  if (!spec.checkpoint.dir.empty() || !spec.checkpoint.resume_from.empty()) {
    const CheckpointSpec& c = spec.checkpoint;
    out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "dir" << YAML::Value << c.dir;
    out << YAML::Key << "every_steps" << YAML::Value << c.every_steps;
    out << YAML::Key << "every_seconds" << YAML::Value << c.every_seconds;
    out << YAML::Key << "keep_last" << YAML::Value << c.keep_last;
    out << YAML::Key << "full_every" << YAML::Value << c.full_every;
    out << YAML::Key << "resume_from" << YAML::Value << c.resume_from;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
    ++pos;
  }
  if (pos == 0) {
    return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", text, "'"));
  }
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, pos), &used);
    if (used != pos) throw std::invalid_argument("trailing characters");
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", text, "'"));
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KiB" || unit == "K" || unit == "Ki")
    mult = 1024.0;
  else if (unit == "MiB" || unit == "M" || unit == "Mi")
    mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G" || unit == "Gi")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else {
    return absl::InvalidArgumentError(absl::StrCat("unknown unit '", unit, "' in byte size '", text,
                                                   "' (B, KiB, MiB, GiB, KB, MB, GB)"));
  }
  // Compared as a double, before the conversion: a value past int64 would be undefined.
  const double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes > static_cast<double>(kMaxByteSize)) {
    return absl::InvalidArgumentError(absl::StrCat("byte size '", text, "' is over the limit of ",
                                                   kMaxByteSize,
                                                   " bytes (kMaxByteSize in common/limits.h)"));
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace dlrm::common
