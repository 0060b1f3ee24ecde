// JobSpecToYaml: a spec written back as the YAML that ParseJobSpec reads.
#include <charconv>
#include <string>

#include "common/job_spec.h"
#include "yaml-cpp/yaml.h"

namespace dlrm::common {
namespace {

// The shortest text that reads back as exactly `v` (0.003, not yaml-cpp's 0.0030000000000000001).
std::string Shortest(double v) {
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string JobSpecToYaml(const JobSpec& spec) {
  YAML::Emitter out;
  // Only the parameters the optimizer's type reads (ParseJobSpec warns about the others).
  auto optimizer = [&out](const OptimizerSpec& o, bool dense) {
    out << YAML::BeginMap << YAML::Key << "type" << YAML::Value << o.type << YAML::Key
        << "learning_rate" << YAML::Value << Shortest(o.learning_rate);
    if (o.type != "sgd") out << YAML::Key << "epsilon" << YAML::Value << Shortest(o.epsilon);
    if (o.type == "adam") {
      out << YAML::Key << "beta1" << YAML::Value << Shortest(o.beta1) << YAML::Key << "beta2"
          << YAML::Value << Shortest(o.beta2);
    }
    if (dense) {
      out << YAML::Key << "weight_decay" << YAML::Value << Shortest(o.weight_decay);
    } else if (o.type == "adagrad" || o.type == "rowwise_adagrad") {
      out << YAML::Key << "initial_accumulator" << YAML::Value << Shortest(o.initial_accumulator);
    }
    out << YAML::EndMap;
  };
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
  if (!spec.lr_schedule.empty()) {
    const LrSchedule& s = spec.lr_schedule;
    out << YAML::Key << "schedule" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "warmup_steps" << YAML::Value << s.warmup_steps;
    out << YAML::Key << "decay_start" << YAML::Value << s.decay_start;
    out << YAML::Key << "decay_steps" << YAML::Value << s.decay_steps;
    out << YAML::Key << "decay_power" << YAML::Value << Shortest(s.decay_power);
    out << YAML::Key << "end_factor" << YAML::Value << Shortest(s.end_factor);
    out << YAML::EndMap;
  }
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
  out << YAML::Key << "network_gbps" << YAML::Value << Shortest(spec.network_gbps);
  if (!spec.hot_sync_dtype.empty()) {
    out << YAML::Key << "hot_sync_dtype" << YAML::Value << spec.hot_sync_dtype;
  }
  out << YAML::Key << "dense_sync_dtype" << YAML::Value << spec.dense_sync_dtype;
  out << YAML::Key << "dense_sync_compression" << YAML::Value << spec.dense_sync_compression;
  out << YAML::Key << "powersgd_rank" << YAML::Value << spec.powersgd_rank;
  out << YAML::Key << "powersgd_warmup_steps" << YAML::Value << spec.powersgd_warmup_steps;
  out << YAML::Key << "hot_sample_batches" << YAML::Value << spec.hot_sample_batches;
  out << YAML::Key << "hot_refresh_steps" << YAML::Value << spec.hot_refresh_steps;
  out << YAML::Key << "device" << YAML::Value << spec.device;
  out << YAML::Key << "math_mode" << YAML::Value << spec.math_mode;
  out << YAML::Key << "eval_every_steps" << YAML::Value << spec.eval_every_steps;
  if (spec.target_auc != 0) {
    out << YAML::Key << "target_auc" << YAML::Value << Shortest(spec.target_auc);
  }
  out << YAML::Key << "max_recoveries" << YAML::Value << spec.max_recoveries;
  out << YAML::EndMap;
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "train" << YAML::Value << YAML::Flow << spec.train_paths;
  out << YAML::Key << "eval" << YAML::Value << YAML::Flow << spec.eval_paths;
  out << YAML::Key << "format" << YAML::Value << spec.format;
  if (spec.eval_paths.empty()) {
    out << YAML::Key << "eval_fraction" << YAML::Value << Shortest(spec.eval_fraction);
  }
  out << YAML::Key << "strict" << YAML::Value << spec.strict;
  out << YAML::EndMap;
  if (!spec.checkpoint.dir.empty() || !spec.checkpoint.resume_from.empty()) {
    const CheckpointSpec& c = spec.checkpoint;
    out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "dir" << YAML::Value << c.dir;
    out << YAML::Key << "every_steps" << YAML::Value << c.every_steps;
    out << YAML::Key << "every_seconds" << YAML::Value << Shortest(c.every_seconds);
    out << YAML::Key << "keep_last" << YAML::Value << c.keep_last;
    out << YAML::Key << "full_every" << YAML::Value << c.full_every;
    out << YAML::Key << "resume_from" << YAML::Value << c.resume_from;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace dlrm::common
