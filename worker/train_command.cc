#include "worker/train_command.h"

#include <atomic>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "worker/job_input.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace dlrm::worker {

absl::StatusOr<std::unique_ptr<dense::Backend>> CreateBackendForDevice(const std::string& device,
                                                                       const std::string& math_mode,
                                                                       int cpu_threads) {
  dense::BackendOptions backend_options;
  DLRM_ASSIGN_OR_RETURN(backend_options.kind, dense::ParseDeviceKind(device));
  DLRM_ASSIGN_OR_RETURN(backend_options.math_mode, dense::ParseMathMode(math_mode));
  backend_options.cpu_threads = cpu_threads;
  DLRM_ASSIGN_OR_RETURN(auto backend, dense::CreateBackend(backend_options));
  if (backend_options.kind == dense::BackendOptions::Kind::kAuto) {
    if (backend->device() == dense::Device::kCuda) {
      DLRM_LOG(INFO) << "device auto: a CUDA device is visible, training on " << backend->name();
    } else if (dense::BuiltWithCuda()) {
      DLRM_LOG(INFO) << "device auto: built with CUDA but no CUDA device is visible, training on "
                     << "the CPU";
    }
  }
  return backend;
}

absl::StatusOr<TrainReport> TrainInProcess(const common::JobSpec& spec,
                                           const TrainRunOptions& options,
                                           TrainArtifacts* artifacts) {
  std::atomic<int64_t> issues{0};
  JobInputOptions input_options;
  input_options.on_issue = [&issues](const ParseIssue& issue) {
    // The reader rate-limits its own warnings; count every one here for the report.
    (void)issue;
    issues.fetch_add(1, std::memory_order_relaxed);
  };
  DLRM_ASSIGN_OR_RETURN(JobInput input, OpenJobInput(spec, input_options));

  DLRM_ASSIGN_OR_RETURN(auto backend,
                        CreateBackendForDevice(
                            options.device_override.empty() ? spec.device : options.device_override,
                            spec.math_mode, options.threads));

  embedding::LocalStoreOptions store_options;
  store_options.tables = TableConfigsFromSpec(spec);
  store_options.seed = spec.seed;
  DLRM_ASSIGN_OR_RETURN(store_options.optimizer, SparseOptimizerFromSpec(spec));
  if (options.threads > 0) store_options.num_threads = options.threads - 1;
  DLRM_ASSIGN_OR_RETURN(auto store, embedding::LocalEmbeddingStore::Create(store_options));

  TrainerOptions trainer_options;
  trainer_options.spec = spec;
  trainer_options.backend = backend.get();
  trainer_options.store = store.get();
  trainer_options.threads = options.threads;
  trainer_options.gpu_table_budget_bytes = options.gpu_table_budget_bytes;
  DLRM_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(trainer_options));

  ProgressLine progress;
  TrainReport report;
  Batch batch;
  double loss_avg = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  bool stop = false;
  for (int epoch = 0; epoch < spec.epochs && !stop; ++epoch) {
    if (epoch > 0) DLRM_RETURN_IF_ERROR(input.train->Rewind());
    while (true) {
      DLRM_ASSIGN_OR_RETURN(bool more, input.train->Next(&batch));
      if (!more) break;
      DLRM_ASSIGN_OR_RETURN(float loss, trainer->Step(batch));
      report.train_samples += batch.size;
      report.steps = trainer->steps_done();
      loss_avg = report.steps == 1 ? loss : 0.98 * loss_avg + 0.02 * loss;
      if (options.show_progress) {
        progress.Update(absl::StrCat("epoch ", epoch + 1, "/", spec.epochs), report.steps,
                        report.train_samples, loss_avg, report.train_samples / elapsed());
      }
      if (spec.max_steps > 0 && report.steps >= spec.max_steps) {
        stop = true;
        break;
      }
    }
  }
  report.train_seconds = elapsed();
  report.samples_per_sec =
      report.train_seconds > 0 ? report.train_samples / report.train_seconds : 0;
  if (options.show_progress) {
    progress.Update("trained", report.steps, report.train_samples, loss_avg, report.samples_per_sec,
                    /*force=*/true);
    progress.Finish();
  }
  if (report.steps == 0) {
    return absl::FailedPreconditionError(absl::StrCat("no training batches in ",
                                                      spec.train_paths.front(), " (",
                                                      spec.train_paths.size(), " file(s))"));
  }
  report.skipped_lines = input.train->skipped();
  if (input.eval != nullptr) {
    DLRM_ASSIGN_OR_RETURN(EvalMetrics m, trainer->Evaluate(input.eval.get()));
    report.auc = m.auc;
    report.logloss = m.logloss;
    report.accuracy = m.accuracy;
    report.eval_samples = m.samples;
  }
  if (artifacts != nullptr) {
    dense::DlrmDenseModel& model = trainer->model();
    artifacts->dense_params.resize(model.num_params());
    backend->CopyToHost(model.params(), artifacts->dense_params.data(), model.num_params());
    DLRM_RETURN_IF_ERROR(trainer->CopyEmbeddingsToStore());
    trainer.reset();
    artifacts->store = std::move(store);
  }
  return report;
}

absl::StatusOr<TrainReport> RunTrainCommand(const TrainCommandOptions& options) {
  DLRM_ASSIGN_OR_RETURN(common::JobSpec spec, common::LoadJobSpec(options.config_path));
  if (options.strict) spec.strict = true;
  DLRM_LOG(INFO) << "job '" << spec.name << "': " << spec.tables.size() << " tables, batch "
                 << spec.batch_size << ", " << spec.epochs << " epoch(s), data "
                 << spec.train_paths.front();
  DLRM_ASSIGN_OR_RETURN(TrainReport report, TrainInProcess(spec, options.run));
  std::printf("%s\n", TrainReportSummary(report).c_str());
  std::fflush(stdout);
  if (report.skipped_lines > 0) {
    DLRM_LOG(WARNING) << report.skipped_lines << " malformed line(s) skipped";
  }
  if (!options.metrics_out.empty()) {
    DLRM_RETURN_IF_ERROR(WriteTrainReport(options.metrics_out, report));
  }
  return report;
}

}  // namespace dlrm::worker
