// `dlrm`: the one binary of the service. Flags are read here, at the edge, and passed down as
// options structs; every subcommand's work lives in its library.
//
//   dlrm train --config job.yaml [--metrics-out m.json] [--strict]   single-process trainer
//              [--resume CHECKPOINT] [--report run.html]
//   dlrm eval --checkpoint DIR --data FILE... [--metrics-out m.json] AUC, logloss, accuracy
//   dlrm predict --checkpoint DIR --data FILE --out scores.tsv       one probability per line
//   dlrm gen-data --out train.tsv --rows N [--max-rows R] [--seed S]  synthetic Criteo TSV
//                 [--format binary] [--multi-hot mlperf|N|N,N,...]   or binary, multi-hot
//   dlrm convert --out train.bin IN.tsv...                            TSV -> compact binary
//                [--multi-hot mlperf|N|N,N,... [--bag-seed S]]        multi-hot bags per token
//   dlrm bench --shape kaggle-shape|model1|mlperf-dcnv2               full step vs GEMM bound
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/training_bench.h"
#include "client/dlrm_commands.h"
#include "client/termination_signals.h"
#include "common/allocator.h"
#include "common/limits.h"
#include "common/logging.h"
#include "dense/cpu/blas_env.h"
#include "worker/input/binary_format.h"
#include "worker/input/synthetic.h"
#include "worker/train_command.h"

namespace dlrm {
namespace {

void AddTrain(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand("train", "Train a job in this process (the reference trainer)");
  static worker::TrainCommandOptions options;
  cmd->add_option("-c,--config", options.config_path, "Job spec (YAML)")->required();
  cmd->add_option("--metrics-out", options.metrics_out,
                  "Write auc, logloss, accuracy, samples_per_sec, steps as one JSON object")
      ->check(NonEmptyPath());
  cmd->add_flag("--strict", options.strict, "Stop at the first malformed input line");
  cmd->add_option("--report", options.report,
                  "Write a self-contained HTML page with the loss, eval AUC and logloss, and "
                  "throughput curves (also when training fails)")
      ->check(NonEmptyPath());
  cmd->add_option("--device", options.run.device_override, "auto | cpu | cuda (overrides spec)")
      ->check(DeviceName());
  cmd->add_option("--threads", options.run.threads, "CPU threads (0 = all cores)")
      ->check(ThreadCount());
  cmd->add_flag("!--no-progress", options.run.show_progress, "Do not draw the progress line");
  cmd->add_option(
         "--resume", options.run.resume_from,
         "Continue from a checkpoint, or from the newest one in a checkpoint folder (overrides "
         "the spec's checkpoint.resume_from; both naming different checkpoints is an "
         "error)")
      ->check(NonEmptyPath());
  cmd->callback([run] {
    *run = [] {
      // Ctrl-C (or SIGTERM) stops the run after its step in progress, so that --report still
      // writes the page of the steps taken, as documented; it killed the process before. A
      // second signal ends the process at once, as it would have without the handler.
      static std::atomic<int> interrupted{0};
      client::InstallTerminationHandlers();
      client::TerminationSignals signals([](int sig) {
        if (interrupted.exchange(sig) != 0) {
          std::signal(sig, SIG_DFL);
          std::raise(sig);
        }
        DLRM_LOG(WARNING) << strsignal(sig) << ": stopping after the step in progress, kept as a "
                          << "checkpoint when the spec has a checkpoint.dir (again to stop at "
                          << "once)";
      });
      options.run.interrupted = &interrupted;
      auto report = worker::RunTrainCommand(options);
      if (report.ok()) return 0;
      const int code = Fail(report.status());
      return interrupted.load() != 0 ? 128 + interrupted.load() : code;
    };
  });
}

void AddCheckpointModelOptions(CLI::App* cmd, worker::CheckpointModelOptions* options) {
  cmd->add_option("--checkpoint", options->checkpoint,
                  "A checkpoint, or a checkpoint folder (its newest committed checkpoint)")
      ->required();
  cmd->add_option("--device", options->device, "cpu | cuda | auto")
      ->check(DeviceName())
      ->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0 = all cores)")
      ->check(ThreadCount());
}

void AddEval(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand("eval", "AUC, logloss and accuracy of a checkpoint's model");
  static worker::CheckpointModelOptions options;
  static std::string metrics_out;
  AddCheckpointModelOptions(cmd, &options);
  cmd->add_option("--data", options.data, "Input files (Criteo TSV or binary)")->required();
  cmd->add_option("--metrics-out", metrics_out, "Write the metrics as JSON (as dlrm train)")
      ->check(NonEmptyPath());
  cmd->callback([run] {
    *run = [] {
      auto m = worker::RunEvalCommand(options, metrics_out);
      return m.ok() ? 0 : Fail(m.status());
    };
  });
}

void AddPredict(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand("predict",
                                 "Click probability of every input line by a checkpoint's model");
  static worker::CheckpointModelOptions options;
  static std::string out;
  AddCheckpointModelOptions(cmd, &options);
  cmd->add_option("--data", options.data, "Input file(s), Criteo TSV or binary")->required();
  cmd->add_option("-o,--out", out,
                  "Scores, one per input line, in input order (a FIFO, device or /dev/stdout is "
                  "written in place; a symlink's target is replaced)")
      ->required();
  cmd->callback([run] {
    *run = [] {
      absl::Status st = worker::RunPredictCommand(options, out);
      return st.ok() ? 0 : Fail(st);
    };
  });
}

void AddGenData(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand(
      "gen-data",
      "Write synthetic Criteo data (TSV, or binary one-hot or multi-hot) with a planted "
      "signal");
  static worker::GenDataOptions options;
  static int64_t max_rows = 0;
  static std::string format = "tsv";
  static std::string multi_hot;
  cmd->add_option("-o,--out", options.output, "Output file")->required();
  cmd->add_option("-n,--rows", options.num_rows, "Number of samples")
      ->check(IntegerIn(1, common::kMaxGenDataRows, "kMaxGenDataRows"));
  cmd->add_option("--seed", options.seed, "Random seed")->check(UnsignedInteger());
  cmd->add_option("--max-rows", max_rows,
                  "Cap every table's cardinality (0 = the full Kaggle cardinalities)")
      ->check(IntegerIn(0, common::kMaxTableRows, "kMaxTableRows"));
  cmd->add_option("--zipf", options.zipf_exponent, "Zipf exponent of the ids");
  cmd->add_option("--signal", options.signal_strength, "Strength of the planted logistic signal");
  cmd->add_option("--empty-fraction", options.empty_fraction, "Fraction of empty fields");
  auto* format_option =
      cmd->add_option("--format", format, "tsv | binary (the default with --multi-hot)")
          ->check(CLI::IsMember({"tsv", "binary"}));
  auto* multi_hot_option = cmd->add_option(
      "--multi-hot", multi_hot,
      "Bags of ids per table: 'mlperf' (MLPerf DLRMv2's sizes), one size for every table, or 26 "
      "comma-separated sizes; writes binary format version 2");
  cmd->callback([run, format_option, multi_hot_option] {
    *run = [format_option, multi_hot_option] {
      if (max_rows > 0) options.cardinalities = worker::CappedKaggleCardinalities(max_rows);
      // Given, even empty (`--multi-hot ""`, an unset shell variable): parsed, so that an empty
      // value is refused instead of writing one-hot TSV.
      if (multi_hot_option->count() > 0) {
        auto bags = worker::ParseBagSizes(multi_hot, "gen-data --multi-hot");
        if (!bags.ok()) return Fail(bags.status());
        options.bags = *bags;
        if (format_option->count() == 0) format = "binary";
      }
      options.format =
          format == "binary" ? worker::InputFormat::kBinary : worker::InputFormat::kTsv;
      worker::GenDataStats stats;
      absl::Status st = worker::GenerateCriteoTsv(options, &stats);
      if (!st.ok()) return Fail(st);
      std::fprintf(stderr, "wrote %lld samples (%.1f%% positive) to %s\n",
                   static_cast<long long>(stats.rows),
                   stats.rows ? 100.0 * stats.positives / stats.rows : 0.0, options.output.c_str());
      return 0;
    };
  });
}

void AddConvert(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand("convert", "Convert Criteo TSV to the compact binary format");
  static worker::ConvertOptions options;
  cmd->add_option("-o,--out", options.output, "Output binary file")->required();
  cmd->add_option("inputs", options.inputs, "Criteo TSV files (binary inputs are refused)")
      ->required();
  cmd->add_flag("--strict", options.strict, "Stop at the first malformed line");
  static std::string multi_hot;
  auto* multi_hot_option = cmd->add_option(
      "--multi-hot", multi_hot,
      "Bags of tokens per table, as MLPerf DLRMv2 materialises multi-hot Criteo 1TB: 'mlperf' "
      "(its sizes), one size for every table, or 26 comma-separated sizes. Each field's token "
      "stays the first of its bag; the others are a fixed function of (--bag-seed, table, "
      "token, position), so a token always brings the same bag (an empty field stays empty). "
      "Writes binary format version 2");
  auto* bag_seed_option =
      cmd->add_option("--bag-seed", options.bag_seed,
                      "Seed of the derived bag tokens (with --multi-hot; default 0)")
          ->check(UnsignedInteger());
  cmd->callback([run, multi_hot_option, bag_seed_option] {
    *run = [multi_hot_option, bag_seed_option] {
      // Given, even empty (`--multi-hot ""`, an unset shell variable): parsed, so that an empty
      // value is refused instead of writing one-hot data.
      if (multi_hot_option->count() > 0) {
        auto bags = worker::ParseBagSizes(multi_hot, "convert --multi-hot");
        if (!bags.ok()) return Fail(bags.status());
        options.bags = *bags;
      } else if (bag_seed_option->count() > 0) {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("convert --bag-seed ", options.bag_seed,
                         ": seeds the bags of --multi-hot, which is not given")));
      }
      auto result = worker::ConvertTsvToBinary(options);
      if (!result.ok()) return Fail(result.status());
      const std::string bags =
          options.bags.has_value()
              ? absl::StrCat(" (multi-hot, bags ", worker::BagSizesString(*options.bags),
                             ", bag seed ", options.bag_seed, ")")
              : "";
      std::fprintf(stderr, "converted %lld records (%lld malformed lines skipped) to %s%s\n",
                   static_cast<long long>(result->records), static_cast<long long>(result->skipped),
                   options.output.c_str(), bags.c_str());
      return 0;
    };
  });
}

void AddBench(CLI::App& app, std::function<int()>* run) {
  auto* cmd = app.add_subcommand(
      "bench", "Full training step vs the GEMM-only bound of a shape (prints one JSON object)");
  static bench::TrainingBenchOptions options;
  cmd->add_option("--shape", options.shape, "kaggle-shape | model1 | mlperf-dcnv2");
  cmd->add_option("--batch-size", options.batch_size, "Batch size (0 = the shape's)")
      ->check(IntegerIn(0, common::kMaxBatchSize, "kMaxBatchSize"));
  cmd->add_option("--steps", options.steps, "Timed steps per round and path")
      ->check(IntegerIn(1, std::numeric_limits<int>::max()));
  cmd->add_option("--batches", options.batches,
                  "Distinct batches the steps cycle through (0: enough that their rows come to "
                  "256 MiB, so that they are not all in a CPU cache)")
      ->check(IntegerIn(0, 10000))
      ->capture_default_str();
  cmd->add_option("--rounds", options.rounds, "Rounds (alternating full step and GEMM-only)")
      ->check(IntegerIn(1, std::numeric_limits<int>::max()));
  cmd->add_option("--threads", options.threads, "CPU threads (0 = all cores)")
      ->check(ThreadCount());
  cmd->add_option("--max-rows", options.max_rows,
                  "Cap every table's rows (0 = the shape's sizes; mlperf-dcnv2's "
                  "7.1M rows of dim 128 take 3.7 GB)")
      ->check(IntegerIn(0, common::kMaxTableRows, "kMaxTableRows"));
  cmd->add_option("--zipf", options.zipf_exponent, "Zipf exponent of the synthetic ids")
      ->check(FiniteNumberIn(0, std::numeric_limits<double>::infinity(), /*min_excluded=*/true));
  cmd->add_option("--device", options.device, "cpu | cuda | auto")->check(DeviceName());
  cmd->add_option("--math-mode", options.math_mode,
                  "GEMMs: fp32 | tf32 | bf16 (CUDA; bf16 also on CPUs with AVX512_BF16 or AMX)");
  cmd->add_option("--gpu-table-budget", options.gpu_table_budget_bytes,
                  "CUDA: bytes of tables (with optimizer state) kept in GPU memory when they fit "
                  "(-1 = 80% of free device memory, 0 = never: the store serves the rows)")
      ->check(IntegerIn(-1, common::kMaxByteSize, "kMaxByteSize"));
  cmd->add_option("--hot-budget", options.hot_budget_bytes,
                  "Bytes of hot rows replicated on the worker (GPU memory on CUDA), chosen from "
                  "a sample of batches like the timed ones; 0 = none")
      ->check(IntegerIn(0, common::kMaxByteSize, "kMaxByteSize"));
  cmd->callback([run] {
    *run = [] {
      auto json = bench::RunTrainingBench(options);
      if (!json.ok()) return Fail(json.status());
      std::printf("%s\n", json->c_str());
      return 0;
    };
  });
}

// CLI11 answers a first word that is no subcommand ("dlrm frob") with "A subcommand is required";
// this names the word and the subcommands instead. Any other error (and --help) is CLI11's own.
// Prints the message; returns CLI11's status (0 for --help, 105-114 for an error).
int PrintParseError(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() != 0 && app.get_subcommands().empty()) {
    for (const std::string& word : app.remaining()) {
      if (word.empty() || word[0] == '-') continue;
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      std::sort(names.begin(), names.end());
      return app.exit(CLI::ParseError(absl::StrCat("unknown subcommand '", word,
                                                   "' (one of: ", absl::StrJoin(names, ", "), ")"),
                                      CLI::ExitCodes::ExtrasError));
    }
  }
  return app.exit(e);
}

// A usage error exits 2, as a bad value the command itself refuses does (and as dlrmctl's usage
// errors do); CLI11's own statuses (105 for a bad value, 106 for a missing flag, 109 for an
// unknown one...) told a script nothing it could rely on.
int ExitOnParseError(CLI::App& app, const CLI::ParseError& e) {
  return PrintParseError(app, e) == 0 ? 0 : 2;
}

}  // namespace
}  // namespace dlrm

int main(int argc, char** argv) {
  dlrm::dense::ReexecWithBlasDefaults(argv);
  dlrm::common::ConfigureAllocatorForLargeBuffers();
  CLI::App app{"dlrm: distributed DLRM training service"};
  app.require_subcommand(1);
  std::string log_level = "info";
  // Also after the subcommand (`dlrm train -c job.yaml --log-level warning`).
  app.add_option("--log-level", log_level, "debug | info | warning | error");
  app.fallthrough();
  std::function<int()> run;
  dlrm::AddTrain(app, &run);
  dlrm::AddEval(app, &run);
  dlrm::AddPredict(app, &run);
  dlrm::AddGenData(app, &run);
  dlrm::AddConvert(app, &run);
  dlrm::AddBench(app, &run);
  dlrm::AddServiceCommands(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return dlrm::ExitOnParseError(app, e);
  }
  dlrm::common::LogSeverity severity;
  if (!dlrm::common::ParseLogSeverity(log_level, &severity)) {
    std::fprintf(stderr, "error: --log-level: unknown level '%s'\n", log_level.c_str());
    return 2;
  }
  dlrm::common::SetMinLogSeverity(severity);
  const int code = run ? run() : 0;
  // A result printed to a full disk or a closed pipe (`dlrm bench > /dev/full`) was lost: that
  // run did not succeed, whatever it computed.
  errno = 0;
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout) {
    std::fprintf(stderr, "error: cannot write to standard output: %s\n",
                 errno != 0 ? std::strerror(errno) : "write error");
    return code != 0 ? code : 1;
  }
  return code;
}
