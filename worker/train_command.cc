#include "worker/train_command.h"

#include <atomic>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "worker/checkpoint.h"
#include "worker/gpu_embeddings.h"
#include "worker/input/batch_reader.h"
#include "worker/job_input.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace dlrm::worker {

absl::StatusOr<std::unique_ptr<dense::Backend>> CreateBackendForDevice(const std::string& device,
                                                                       const std::string& math_mode,
                                                                       int cpu_threads,
                                                                       int cuda_device) {
  dense::BackendOptions backend_options;
  backend_options.device_ordinal = cuda_device;
  DLRM_ASSIGN_OR_RETURN(backend_options.kind, dense::ParseDeviceKind(device));
  DLRM_ASSIGN_OR_RETURN(backend_options.math_mode, dense::ParseMathMode(math_mode));
  backend_options.cpu_threads = cpu_threads;
  DLRM_ASSIGN_OR_RETURN(auto backend, dense::CreateBackend(backend_options));
  if (backend_options.kind == dense::BackendOptions::Kind::kAuto) {
    if (backend->device() == dense::Device::kCuda) {
      DLRM_LOG(INFO) << "device auto: a CUDA device is visible, training on " << backend->name();
    } else if (dense::BuiltWithCuda()) {
      DLRM_LOG(INFO) << "device auto: built with CUDA but no CUDA device is visible, training on "
                     << backend->name();
    } else {
      DLRM_LOG(INFO) << "training on " << backend->name();
    }
  } else {
    DLRM_LOG(INFO) << "training on " << backend->name();
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

  // Half rows live only in GPU tables here: the in-process store keeps fp32 rows.
  const common::TableSpec* half_table = nullptr;
  for (const common::TableSpec& t : spec.tables) {
    if (t.dtype != "fp32" && half_table == nullptr) half_table = &t;
  }
  if (half_table != nullptr && backend->device() != dense::Device::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", half_table->name, ": dtype ", half_table->dtype,
        ": dlrm train on the CPU keeps its tables in process as fp32; half-precision rows are "
        "stored by the CUDA device (--device cuda, GPU tables) and by parameter servers (dlrm "
        "local, a cluster job). Set tables.dtype: fp32 here."));
  }
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
  if (half_table != nullptr && !trainer->gpu_tables()) {
    const int64_t bytes =
        GpuEmbeddings::DeviceBytes(store_options.tables, store_options.optimizer.type);
    return absl::ResourceExhaustedError(absl::StrCat(
        "table ", half_table->name, ": dtype ", half_table->dtype,
        ": the CUDA device stores half rows only in GPU tables, but the embedding tables (", bytes,
        " bytes with optimizer state) stay in host memory, which keeps fp32 rows: they exceed "
        "the GPU table budget (--gpu-table-budget ",
        options.gpu_table_budget_bytes < 0 ? std::string("auto: 80% of free device memory")
                                           : absl::StrCat(options.gpu_table_budget_bytes),
        ") or do not fit on the device. Raise the budget, shrink the tables or set "
        "tables.dtype: fp32."));
  }

  TrainPosition position;
  std::string resumed_dir;
  if (!options.resume_from.empty()) {
    DLRM_ASSIGN_OR_RETURN(RestoredCheckpoint restored,
                          RestoreCheckpoint(options.resume_from, {}, trainer.get(), store.get()));
    // GPU-resident tables were initialised on the device: they take the restored rows now.
    DLRM_RETURN_IF_ERROR(trainer->LoadEmbeddingsFromStore());
    store->ClearChanged();
    position = restored.position;
    resumed_dir = restored.dir;
    DLRM_LOG(INFO) << "resumed from " << restored.dir << ": step " << position.step << ", epoch "
                   << position.epoch + 1 << ", " << position.batches << " batch(es) into it";
  }
  std::unique_ptr<TrainCheckpointer> checkpointer;
  if (!spec.checkpoint.dir.empty()) {
    DLRM_ASSIGN_OR_RETURN(checkpointer, TrainCheckpointer::Create(spec, resumed_dir));
    if (spec.checkpoint.every_steps > 0 || spec.checkpoint.every_seconds > 0) {
      checkpointer->PrepareSnapshotMemory(*store);
    }
  }
  // Training waits only for the snapshot; the files are written in the background (the next
  // checkpoint, or the end of training, waits for them).
  auto start_checkpoint = [&](bool last) -> absl::Status {
    DLRM_ASSIGN_OR_RETURN(double stall, checkpointer->Start(*trainer, *store, position, last));
    DLRM_LOG(DEBUG) << "checkpoint at step " << position.step << ": training waited " << stall
                    << " s for the snapshot";
    return absl::OkStatus();
  };

  ProgressLine progress;
  const int64_t total_steps = TotalSteps(spec, input.train_records);
  TrainReport report;
  Batch batch;
  double loss_avg = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  RunRecorder* recorder = options.recorder;
  if (recorder != nullptr) recorder->Start(0, position.step, position.samples);
  // training.eval_every_steps: the model is evaluated on the eval split while training waits.
  double eval_seconds = 0;      // spent in periodic evaluations: not training time
  int64_t evaluated_step = -1;  // the model of this step was evaluated last
  EvalMetrics last_eval;
  auto evaluate = [&]() -> absl::StatusOr<EvalMetrics> {
    if (evaluated_step == trainer->steps_done()) return last_eval;
    if (evaluated_step >= 0) DLRM_RETURN_IF_ERROR(input.eval->Rewind());
    DLRM_ASSIGN_OR_RETURN(last_eval, trainer->Evaluate(input.eval.get()));
    evaluated_step = trainer->steps_done();
    if (recorder != nullptr) {
      recorder->RecordEval(elapsed(), evaluated_step, last_eval.auc, last_eval.logloss);
    }
    return last_eval;
  };
  const int64_t first_epoch = position.epoch;
  bool stop = spec.max_steps > 0 && position.step >= spec.max_steps;
  for (int64_t epoch = first_epoch; epoch < spec.epochs && !stop; ++epoch) {
    if (epoch > first_epoch) {
      DLRM_RETURN_IF_ERROR(input.train->Rewind());
      position.epoch = epoch;
      position.batches = 0;
    } else {
      // Resuming mid-epoch: the batches trained before the checkpoint are read and dropped, so
      // the next batch is the one the uninterrupted run would take.
      for (int64_t b = 0; b < position.batches; ++b) {
        DLRM_ASSIGN_OR_RETURN(bool more, input.train->Next(&batch));
        if (!more) break;
      }
    }
    while (true) {
      DLRM_ASSIGN_OR_RETURN(bool more, input.train->Next(&batch));
      if (!more) break;
      DLRM_ASSIGN_OR_RETURN(float loss, trainer->Step(batch));
      report.train_samples += batch.size;
      report.steps = trainer->steps_done();
      position.step = report.steps;
      position.samples += batch.size;
      ++position.batches;
      loss_avg = report.train_samples == batch.size ? loss : 0.98 * loss_avg + 0.02 * loss;
      if (options.show_progress) {
        progress.Update(absl::StrCat("epoch ", epoch + 1, "/", spec.epochs), report.steps,
                        report.train_samples, loss_avg,
                        report.train_samples / (elapsed() - eval_seconds),
                        /*force=*/false, total_steps);
      }
      if (recorder != nullptr) recorder->Record(elapsed(), report.steps, position.samples, loss);
      if (spec.eval_every_steps > 0 && input.eval != nullptr &&
          report.steps % spec.eval_every_steps == 0) {
        const double eval_start = elapsed();
        DLRM_ASSIGN_OR_RETURN(EvalMetrics m, evaluate());
        const double eval_took = elapsed() - eval_start;
        eval_seconds += eval_took;
        if (recorder != nullptr) recorder->Pause(eval_took);
        if (options.show_progress) progress.Finish();
        DLRM_LOG(INFO) << "step " << report.steps << ": eval AUC " << m.auc << ", logloss "
                       << m.logloss << " (" << m.samples << " samples, " << eval_took << " s)";
      }
      if (checkpointer != nullptr && checkpointer->Due(position.step)) {
        DLRM_RETURN_IF_ERROR(start_checkpoint(/*last=*/false));
      } else if (checkpointer != nullptr) {
        checkpointer->StartPreCopyIfNear(*trainer, *store, position.step);
      }
      if (spec.max_steps > 0 && report.steps >= spec.max_steps) {
        stop = true;
        break;
      }
    }
  }
  report.train_seconds = elapsed() - eval_seconds;
  report.samples_per_sec =
      report.train_seconds > 0 ? report.train_samples / report.train_seconds : 0;
  if (options.show_progress) {
    progress.Update("trained", report.steps, report.train_samples, loss_avg, report.samples_per_sec,
                    /*force=*/true);
    progress.Finish();
  }
  report.steps = trainer->steps_done();
  if (report.steps == 0) {
    return absl::FailedPreconditionError(absl::StrCat("no training batches in ",
                                                      spec.train_paths.front(), " (",
                                                      spec.train_paths.size(), " file(s))"));
  }
  // The trained model is always kept when the spec names a checkpoint folder.
  // Training is over: the last checkpoint is written from the tables themselves, no copy.
  if (checkpointer != nullptr && checkpointer->last_step() < position.step) {
    DLRM_RETURN_IF_ERROR(start_checkpoint(/*last=*/true));
  }
  if (checkpointer != nullptr && checkpointer->writing()) {
    DLRM_ASSIGN_OR_RETURN(CheckpointWriteResult last, checkpointer->Finish());
    (void)last;
  }
  report.skipped_lines = input.train->skipped();
  if (input.eval != nullptr) {
    DLRM_ASSIGN_OR_RETURN(EvalMetrics m, evaluate());
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

namespace {

// The page of --report: the summary of the run (of what it trained, when it failed) and its curves.
absl::Status WriteTrainRunReport(const TrainCommandOptions& options, const common::JobSpec& spec,
                                 const absl::StatusOr<TrainReport>& trained,
                                 const RunRecorder& recorder) {
  TrainReport partial;
  partial.steps = recorder.last_step();
  partial.train_samples = recorder.last_samples();
  partial.train_seconds = recorder.last_seconds();
  partial.samples_per_sec =
      partial.train_seconds > 0 ? partial.train_samples / partial.train_seconds : 0;
  HtmlReportOptions page;
  page.title = absl::StrCat("dlrm train: ", spec.name);
  page.summary = RunSummary(spec.name, trained.ok() ? *trained : partial,
                            trained.ok() ? "" : std::string(trained.status().message()));
  page.summary.insert(page.summary.begin() + 1, {"config", options.config_path});
  DLRM_RETURN_IF_ERROR(WriteHtmlReport(options.report, page, recorder));
  DLRM_LOG(INFO) << "wrote the run report to " << options.report;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainReport> RunTrainCommand(const TrainCommandOptions& options) {
  DLRM_ASSIGN_OR_RETURN(common::JobSpec spec, common::LoadJobSpec(options.config_path));
  if (options.strict) spec.strict = true;
  if (spec.train_paths.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.config_path, ": data.train: missing; `dlrm train` needs training files"));
  }
  DLRM_LOG(INFO) << "job '" << spec.name << "': " << spec.tables.size() << " tables, batch "
                 << spec.batch_size << ", " << spec.epochs << " epoch(s), data "
                 << spec.train_paths.front();
  if (!options.report.empty()) DLRM_RETURN_IF_ERROR(CheckReportPath(options.report));
  RunRecorder recorder;
  TrainRunOptions run = options.run;
  if (!options.report.empty()) run.recorder = &recorder;
  absl::StatusOr<TrainReport> trained = TrainInProcess(spec, run);
  if (!trained.ok()) {
    // The page of a run that failed shows how far it got.
    if (!options.report.empty() && !recorder.training().empty()) {
      absl::Status written = WriteTrainRunReport(options, spec, trained, recorder);
      if (!written.ok()) DLRM_LOG(WARNING) << written.message();
    }
    return trained.status();
  }
  const TrainReport& report = *trained;
  std::printf("%s\n", TrainReportSummary(report).c_str());
  std::fflush(stdout);
  if (report.skipped_lines > 0) {
    DLRM_LOG(WARNING) << report.skipped_lines << " malformed line(s) skipped";
  }
  if (!options.metrics_out.empty()) {
    DLRM_RETURN_IF_ERROR(WriteTrainReport(options.metrics_out, report));
  }
  if (!options.report.empty()) {
    DLRM_RETURN_IF_ERROR(WriteTrainRunReport(options, spec, trained, recorder));
  }
  return report;
}

namespace {

// The model of a checkpoint: its job spec, a store and a trainer with the checkpoint loaded.
struct CheckpointModel {
  common::JobSpec spec;
  std::unique_ptr<dense::Backend> backend;
  std::unique_ptr<embedding::LocalEmbeddingStore> store;
  std::unique_ptr<Trainer> trainer;
};

absl::StatusOr<CheckpointModel> LoadCheckpointModel(const CheckpointModelOptions& options) {
  DLRM_ASSIGN_OR_RETURN(std::string dir, embedding::ResolveCheckpoint(options.checkpoint));
  DLRM_ASSIGN_OR_RETURN(embedding::CheckpointManifest manifest, embedding::ReadManifest(dir));
  CheckpointModel m;
  DLRM_ASSIGN_OR_RETURN(m.spec,
                        common::ParseJobSpec(manifest.spec_yaml, absl::StrCat(dir, " (job spec)")));
  DLRM_ASSIGN_OR_RETURN(m.backend,
                        CreateBackendForDevice(options.device, m.spec.math_mode, options.threads));
  embedding::LocalStoreOptions store_options;
  store_options.tables = TableConfigsFromSpec(m.spec);
  store_options.seed = m.spec.seed;
  DLRM_ASSIGN_OR_RETURN(store_options.optimizer, SparseOptimizerFromSpec(m.spec));
  if (options.threads > 0) store_options.num_threads = options.threads - 1;
  DLRM_ASSIGN_OR_RETURN(m.store, embedding::LocalEmbeddingStore::Create(store_options));
  TrainerOptions trainer_options;
  trainer_options.spec = m.spec;
  trainer_options.backend = m.backend.get();
  trainer_options.store = m.store.get();
  trainer_options.threads = options.threads;
  DLRM_ASSIGN_OR_RETURN(m.trainer, Trainer::Create(trainer_options));
  DLRM_ASSIGN_OR_RETURN(RestoredCheckpoint restored,
                        RestoreCheckpoint(dir, {}, m.trainer.get(), m.store.get()));
  DLRM_LOG(INFO) << "model of " << restored.dir << " (job '" << m.spec.name << "', step "
                 << restored.manifest.step << ")";
  return m;
}

absl::StatusOr<std::unique_ptr<BatchReader>> OpenScoringInput(const CheckpointModel& model,
                                                              const std::vector<std::string>& data,
                                                              bool strict) {
  if (data.empty()) return absl::InvalidArgumentError("--data: no input file");
  BatchReaderOptions reader;
  DLRM_ASSIGN_OR_RETURN(reader.format, ParseInputFormat(model.spec.format));
  reader.paths = data;
  reader.batch_size = model.spec.batch_size;
  reader.strict = strict;
  for (const auto& t : model.spec.tables) reader.table_rows.push_back(t.rows);
  return BatchReader::Create(reader);
}

}  // namespace

absl::StatusOr<EvalMetrics> RunEvalCommand(const CheckpointModelOptions& options,
                                           const std::string& metrics_out) {
  DLRM_ASSIGN_OR_RETURN(CheckpointModel model, LoadCheckpointModel(options));
  DLRM_ASSIGN_OR_RETURN(auto reader, OpenScoringInput(model, options.data, /*strict=*/false));
  DLRM_ASSIGN_OR_RETURN(EvalMetrics m, model.trainer->Evaluate(reader.get()));
  TrainReport report;
  report.auc = m.auc;
  report.logloss = m.logloss;
  report.accuracy = m.accuracy;
  report.eval_samples = m.samples;
  report.steps = model.trainer->steps_done();
  report.skipped_lines = reader->skipped();
  std::printf("AUC %.4f  logloss %.4f  accuracy %.4f  (%lld samples, model of step %lld)\n", m.auc,
              m.logloss, m.accuracy, static_cast<long long>(m.samples),
              static_cast<long long>(report.steps));
  std::fflush(stdout);
  if (report.skipped_lines > 0) {
    DLRM_LOG(WARNING) << report.skipped_lines << " malformed line(s) skipped";
  }
  if (!metrics_out.empty()) DLRM_RETURN_IF_ERROR(WriteTrainReport(metrics_out, report));
  return m;
}

absl::Status RunPredictCommand(const CheckpointModelOptions& options, const std::string& out) {
  DLRM_ASSIGN_OR_RETURN(CheckpointModel model, LoadCheckpointModel(options));
  DLRM_ASSIGN_OR_RETURN(auto reader, OpenScoringInput(model, options.data, /*strict=*/true));
  std::vector<float> scores;
  std::vector<float> labels;
  DLRM_RETURN_IF_ERROR(model.trainer->Predict(reader.get(), &scores, &labels));
  const std::string tmp = absl::StrCat(out, ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("--out: cannot write ", tmp));
  for (float s : scores) std::fprintf(f, "%.9g\n", s);
  const bool ok = std::fflush(f) == 0 && std::ferror(f) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), out.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("--out: cannot write ", out));
  }
  std::fprintf(stderr, "wrote %zu scores to %s\n", scores.size(), out.c_str());
  return absl::OkStatus();
}

}  // namespace dlrm::worker
