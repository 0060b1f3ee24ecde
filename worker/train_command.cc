#include "worker/train_command.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/paths.h"
#include "common/status.h"
#include "dense/backend_factory.h"
#include "worker/checkpoint.h"
#include "worker/gpu_embeddings.h"
#include "worker/input/batch_reader.h"
#include "worker/input/output_file.h"
#include "worker/job_input.h"
#include "worker/progress.h"
#include "worker/trainer.h"

namespace dlrm::worker {

absl::StatusOr<std::unique_ptr<dense::Backend>> CreateBackendForDevice(
    const std::string& device, const std::string& math_mode, int cpu_threads, int cuda_device,
    const std::string& activity) {
  dense::BackendOptions backend_options;
  backend_options.device_ordinal = cuda_device;
  DLRM_ASSIGN_OR_RETURN(backend_options.kind, dense::ParseDeviceKind(device));
  DLRM_ASSIGN_OR_RETURN(backend_options.math_mode, dense::ParseMathMode(math_mode));
  backend_options.cpu_threads = cpu_threads;
  DLRM_ASSIGN_OR_RETURN(auto backend, dense::CreateBackend(backend_options));
  if (backend_options.kind == dense::BackendOptions::Kind::kAuto) {
    if (backend->device() == dense::Device::kCuda) {
      DLRM_LOG(INFO) << "device auto: a CUDA device is visible, " << activity << " on "
                     << backend->name();
    } else if (dense::BuiltWithCuda()) {
      DLRM_LOG(INFO) << "device auto: built with CUDA but no CUDA device is visible, " << activity
                     << " on " << backend->name();
    } else {
      DLRM_LOG(INFO) << activity << " on " << backend->name();
    }
  } else {
    DLRM_LOG(INFO) << activity << " on " << backend->name();
  }
  if (backend_options.math_mode == dense::MathMode::kTf32 &&
      backend->device() != dense::Device::kCuda) {
    DLRM_LOG(WARNING) << "training.math_mode tf32 is a GPU mode (TensorFloat-32 tensor cores): "
                      << "the CPU computes in fp32";
  }
  return backend;
}

namespace {

// The checkpoint a run continues from: --resume, else the spec's checkpoint.resume_from (which
// LoadJobSpec resolved against the spec's folder); "" = a fresh start.
absl::StatusOr<std::string> ResumeFrom(const common::JobSpec& spec,
                                       const TrainRunOptions& options) {
  const std::string& key = spec.checkpoint.resume_from;
  if (options.resume_from.empty()) return key;
  DLRM_RETURN_IF_ERROR(common::CheckResumeAgrees("--resume", options.resume_from, key));
  return options.resume_from;
}

// What the summary line and the log say when the model was not evaluated.
std::string NoEvalReason(const common::JobSpec& spec, int64_t train_records) {
  if (!spec.eval_paths.empty()) return "the files of data.eval have no valid record";
  if (spec.eval_fraction <= 0) return "data.eval_fraction is 0 and data.eval names no file";
  return absl::StrCat("data.eval_fraction ", spec.eval_fraction, " of ",
                      train_records >= 0 ? absl::StrCat(train_records) : std::string("the"),
                      " records is less than one record");
}

// One `dlrm train` run, in the stages a cluster worker's run takes (JobRun, worker/job_run.h):
// SetUp (input, backend, store, trainer), Restore (a resume), CreateCheckpointer, Train (the
// epochs, with periodic evaluations and checkpoints), Finish (the last checkpoint, the final
// evaluation, the report).
class InProcessRun {
 public:
  InProcessRun(const common::JobSpec& spec, const TrainRunOptions& options)
      : spec_(spec), options_(options) {}

  absl::Status SetUp();
  absl::Status Restore();
  absl::Status CreateCheckpointer();
  absl::Status Train();
  absl::StatusOr<TrainReport> Finish(TrainArtifacts* artifacts);

 private:
  // The trainer, its store and backend, refusing half-precision tables it cannot keep.
  absl::Status CreateTrainer();
  // One epoch from position_ (a resumed one from its checkpoint's batch); sets stop_ when
  // max_steps or the target AUC ends training.
  absl::Status RunEpoch(int64_t epoch);
  // After each step: the interruption, the periodic evaluation, the checkpoint.
  absl::Status AfterStep(int64_t epoch, float loss);
  // CANCELLED after the step in progress, the model kept as a checkpoint when there is a folder.
  absl::Status Interrupted();
  // The model of the step taken last, on the eval split (once per step).
  absl::StatusOr<EvalMetrics> Evaluate();
  // Training waits only for the snapshot; the files are written in the background (the next
  // checkpoint, or the end of training, waits for them).
  absl::Status StartCheckpoint(bool last);
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  const common::JobSpec& spec_;
  const TrainRunOptions& options_;
  std::chrono::steady_clock::time_point start_;  // of Train: the set-up is no training time
  std::string resume_from_;
  bool resume_from_spec_ = false;  // resume_from_ is the spec's checkpoint.resume_from
  JobInput input_;
  std::unique_ptr<dense::Backend> backend_;
  std::unique_ptr<embedding::LocalEmbeddingStore> store_;
  std::unique_ptr<Trainer> trainer_;
  TrainPosition position_;
  // The checkpoint resumed from, verified once: loaded, then continued by the checkpointer.
  std::optional<ValidCheckpoint> resumed_;
  std::unique_ptr<TrainCheckpointer> checkpointer_;
  ProgressLine progress_;
  int64_t total_steps_ = -1;
  TrainReport report_;
  Batch batch_;
  LossAverage loss_avg_;
  bool stop_ = false;
  // training.eval_every_steps: the model is evaluated on the eval split while training waits.
  double eval_seconds_ = 0;      // spent in periodic evaluations: not training time
  int64_t evaluated_step_ = -1;  // the model of this step was evaluated last
  EvalMetrics last_eval_;
};

absl::Status InProcessRun::SetUp() {
  DLRM_ASSIGN_OR_RETURN(resume_from_, ResumeFrom(spec_, options_));
  resume_from_spec_ = options_.resume_from.empty() && !resume_from_.empty();
  DLRM_ASSIGN_OR_RETURN(input_, OpenJobInput(spec_, JobInputOptions{}));
  if (input_.eval != nullptr && !spec_.eval_paths.empty()) {
    // Eval files without a valid record: no eval data, as when the split holds out none.
    Batch probe;
    DLRM_ASSIGN_OR_RETURN(bool any, input_.eval->Next(&probe));
    if (any) {
      DLRM_RETURN_IF_ERROR(input_.eval->Rewind());
    } else {
      input_.eval.reset();
    }
  }
  return CreateTrainer();
}

absl::Status InProcessRun::CreateTrainer() {
  DLRM_ASSIGN_OR_RETURN(
      backend_, CreateBackendForDevice(
                    options_.device_override.empty() ? spec_.device : options_.device_override,
                    spec_.math_mode, options_.threads));

  // Half rows live only in GPU tables here: the in-process store keeps fp32 rows.
  const common::TableSpec* half_table = nullptr;
  for (const common::TableSpec& t : spec_.tables) {
    if (t.dtype != "fp32" && half_table == nullptr) half_table = &t;
  }
  if (half_table != nullptr && backend_->device() != dense::Device::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", half_table->name, ": dtype ", half_table->dtype,
        ": dlrm train on the CPU keeps its tables in process as fp32; half-precision rows are "
        "stored by the CUDA device (--device cuda, GPU tables) and by parameter servers (dlrm "
        "local, a cluster job). Set tables.dtype: fp32 here."));
  }
  embedding::LocalStoreOptions store_options;
  store_options.tables = TableConfigsFromSpec(spec_);
  store_options.seed = spec_.seed;
  DLRM_ASSIGN_OR_RETURN(store_options.optimizer, SparseOptimizerFromSpec(spec_));
  if (options_.threads > 0) store_options.num_threads = options_.threads - 1;
  DLRM_ASSIGN_OR_RETURN(store_, embedding::LocalEmbeddingStore::Create(store_options));

  TrainerOptions trainer_options;
  trainer_options.spec = spec_;
  trainer_options.backend = backend_.get();
  trainer_options.store = store_.get();
  trainer_options.threads = options_.threads;
  trainer_options.gpu_table_budget_bytes = options_.gpu_table_budget_bytes;
  DLRM_ASSIGN_OR_RETURN(trainer_, Trainer::Create(trainer_options));
  if (half_table != nullptr && !trainer_->gpu_tables()) {
    const int64_t bytes =
        GpuEmbeddings::DeviceBytes(store_options.tables, store_options.optimizer.type);
    return absl::ResourceExhaustedError(absl::StrCat(
        "table ", half_table->name, ": dtype ", half_table->dtype,
        ": the CUDA device stores half rows only in GPU tables, but the embedding tables (", bytes,
        " bytes with optimizer state) stay in host memory, which keeps fp32 rows: they exceed "
        "the GPU table budget (--gpu-table-budget ",
        options_.gpu_table_budget_bytes < 0 ? std::string("auto: 80% of free device memory")
                                            : absl::StrCat(options_.gpu_table_budget_bytes),
        ") or do not fit on the device. Raise the budget, shrink the tables or set "
        "tables.dtype: fp32."));
  }
  return absl::OkStatus();
}

absl::Status InProcessRun::Restore() {
  if (resume_from_.empty()) return absl::OkStatus();
  absl::StatusOr<ValidCheckpoint> found = FindValidCheckpoint(resume_from_);
  absl::StatusOr<RestoredCheckpoint> restoring =
      found.ok() ? RestoreCheckpoint(*found, {}, trainer_.get(), store_.get())
                 : absl::StatusOr<RestoredCheckpoint>(found.status());
  if (!restoring.ok() && resume_from_spec_) {
    return Annotate(restoring.status(), "the job spec's checkpoint.resume_from");
  }
  DLRM_ASSIGN_OR_RETURN(RestoredCheckpoint restored, std::move(restoring));
  resumed_ = *std::move(found);
  // GPU-resident tables were initialised on the device: they take the restored rows now.
  DLRM_RETURN_IF_ERROR(trainer_->LoadEmbeddingsFromStore());
  store_->ClearChanged();
  position_ = restored.position;
  DLRM_LOG(INFO) << "resumed from " << restored.dir << ": step " << position_.step << ", epoch "
                 << position_.epoch + 1 << ", " << position_.batches << " batch(es) into it";
  return absl::OkStatus();
}

absl::Status InProcessRun::CreateCheckpointer() {
  if (spec_.checkpoint.dir.empty()) return absl::OkStatus();
  DLRM_ASSIGN_OR_RETURN(checkpointer_,
                        TrainCheckpointer::Create(spec_, resumed_ ? &*resumed_ : nullptr));
  if (spec_.checkpoint.every_steps > 0 || spec_.checkpoint.every_seconds > 0) {
    checkpointer_->PrepareSnapshotMemory(*store_);
  }
  return absl::OkStatus();
}

absl::Status InProcessRun::StartCheckpoint(bool last) {
  DLRM_ASSIGN_OR_RETURN(double stall, checkpointer_->Start(*trainer_, *store_, position_, last));
  DLRM_LOG(DEBUG) << "checkpoint at step " << position_.step << ": training waited " << stall
                  << " s for the snapshot";
  return absl::OkStatus();
}

absl::StatusOr<EvalMetrics> InProcessRun::Evaluate() {
  if (evaluated_step_ == trainer_->steps_done()) return last_eval_;
  if (evaluated_step_ >= 0) DLRM_RETURN_IF_ERROR(input_.eval->Rewind());
  absl::StatusOr<EvalMetrics> m = trainer_->Evaluate(input_.eval.get());
  if (!m.ok()) {
    return Annotate(m.status(), absl::StrCat("evaluation after step ", trainer_->steps_done()));
  }
  last_eval_ = *m;
  evaluated_step_ = trainer_->steps_done();
  if (options_.recorder != nullptr) {
    options_.recorder->RecordEval(Elapsed(), evaluated_step_, last_eval_.auc, last_eval_.logloss);
  }
  return last_eval_;
}

absl::Status InProcessRun::Train() {
  start_ = std::chrono::steady_clock::now();
  total_steps_ = TotalSteps(spec_, input_.train_records);
  report_.target_auc = spec_.target_auc;
  if (options_.recorder != nullptr) options_.recorder->Start(0, position_.step, position_.samples);
  if (spec_.target_auc > 0 && input_.eval == nullptr) {
    DLRM_LOG(WARNING) << "training.target_auc " << spec_.target_auc << " is never checked: no eval "
                      << "data (" << NoEvalReason(spec_, input_.train_records) << ")";
  }
  const int64_t first_epoch = position_.epoch;
  const int64_t first_step = position_.step;
  stop_ = spec_.max_steps > 0 && position_.step >= spec_.max_steps;
  for (int64_t epoch = first_epoch; epoch < spec_.epochs && !stop_; ++epoch) {
    if (epoch > first_epoch) {
      DLRM_RETURN_IF_ERROR(input_.train->Rewind());
      position_.epoch = epoch;
      position_.batches = 0;
    } else {
      DLRM_RETURN_IF_ERROR(
          SkipTrainedBatches(input_.train.get(), position_.batches, position_.epoch, ""));
    }
    DLRM_RETURN_IF_ERROR(RunEpoch(epoch));
    if (!stop_) {
      // The epoch is done: a checkpoint from here on says so (the next epoch, none of it read)
      // rather than "every batch of this one", whose last batch may be short and would be
      // counted as a whole one by a resume with another batch size.
      position_.epoch = epoch + 1;
      position_.batches = 0;
    }
  }
  if (first_step > 0 && report_.train_samples == 0) {
    DLRM_LOG(WARNING) << "resumed at step " << first_step << " (epoch " << first_epoch + 1
                      << "), where training.max_steps " << spec_.max_steps
                      << " and training.epochs " << spec_.epochs
                      << " leave nothing to train: the model is the checkpoint's";
  }
  return absl::OkStatus();
}

absl::Status InProcessRun::RunEpoch(int64_t epoch) {
  while (true) {
    DLRM_ASSIGN_OR_RETURN(bool more, input_.train->Next(&batch_));
    if (!more) return absl::OkStatus();
    DLRM_ASSIGN_OR_RETURN(float loss, trainer_->Step(batch_));
    report_.train_samples += batch_.size;
    report_.steps = trainer_->steps_done();
    position_.step = report_.steps;
    position_.samples += batch_.size;
    ++position_.batches;
    DLRM_RETURN_IF_ERROR(AfterStep(epoch, loss));
    if ((spec_.max_steps > 0 && report_.steps >= spec_.max_steps) ||
        report_.reached_target_step >= 0) {
      stop_ = true;
      return absl::OkStatus();
    }
  }
}

absl::Status InProcessRun::AfterStep(int64_t epoch, float loss) {
  loss_avg_.Add(loss);
  if (options_.show_progress) {
    progress_.Update(absl::StrCat("epoch ", epoch + 1, "/", spec_.epochs), report_.steps,
                     report_.train_samples, loss_avg_.value(),
                     report_.train_samples / (Elapsed() - eval_seconds_),
                     /*force=*/false, total_steps_);
  }
  if (options_.recorder != nullptr) {
    options_.recorder->Record(Elapsed(), report_.steps, position_.samples, loss);
  }
  if (options_.interrupted != nullptr && options_.interrupted->load() != 0) return Interrupted();
  if (spec_.eval_every_steps > 0 && input_.eval != nullptr &&
      report_.steps % spec_.eval_every_steps == 0) {
    const double eval_start = Elapsed();
    DLRM_ASSIGN_OR_RETURN(EvalMetrics m, Evaluate());
    const double eval_took = Elapsed() - eval_start;
    eval_seconds_ += eval_took;
    if (options_.recorder != nullptr) options_.recorder->Pause(eval_took);
    if (options_.show_progress) progress_.Finish();
    DLRM_LOG(INFO) << "step " << report_.steps << ": eval AUC " << m.auc << ", logloss "
                   << m.logloss << " (" << m.samples << " samples, " << eval_took << " s)";
    // training.target_auc: training stops at this step, as if max_steps ended it here.
    if (spec_.target_auc > 0 && m.auc >= spec_.target_auc) {
      report_.reached_target_step = report_.steps;
      DLRM_LOG(INFO) << "reached target AUC " << spec_.target_auc << " (eval AUC " << m.auc
                     << ") at step " << report_.steps
                     << (total_steps_ > 0 ? absl::StrCat(" of ", total_steps_) : "")
                     << ": training stops";
    }
  }
  if (checkpointer_ != nullptr && checkpointer_->Due(position_.step)) {
    DLRM_RETURN_IF_ERROR(StartCheckpoint(/*last=*/false));
  } else if (checkpointer_ != nullptr) {
    checkpointer_->StartPreCopyIfNear(*trainer_, *store_, position_.step);
  }
  return absl::OkStatus();
}

absl::Status InProcessRun::Interrupted() {
  if (options_.show_progress) progress_.Finish();
  std::string message = absl::StrCat("interrupted (", strsignal(options_.interrupted->load()),
                                     ") after step ", report_.steps);
  // The steps taken are kept as at the end of a run, so that --resume goes on from them instead
  // of from the last periodic checkpoint (without one, from the start).
  if (checkpointer_ != nullptr && checkpointer_->last_step() < position_.step) {
    absl::Status started = StartCheckpoint(/*last=*/true);
    absl::StatusOr<CheckpointWriteResult> kept =
        started.ok() ? checkpointer_->Finish() : absl::StatusOr<CheckpointWriteResult>(started);
    if (kept.ok()) {
      absl::StrAppend(&message, "; its model is checkpoint ", kept->dir, " (dlrm train --resume ",
                      spec_.checkpoint.dir, " goes on from it)");
    } else {
      absl::StrAppend(&message, "; its checkpoint was not written: ", kept.status().message());
    }
  }
  return absl::CancelledError(message);
}

absl::StatusOr<TrainReport> InProcessRun::Finish(TrainArtifacts* artifacts) {
  report_.train_seconds = Elapsed() - eval_seconds_;
  report_.samples_per_sec =
      report_.train_seconds > 0 ? report_.train_samples / report_.train_seconds : 0;
  if (options_.show_progress) {
    progress_.Update("trained", report_.steps, report_.train_samples, loss_avg_.value(),
                     report_.samples_per_sec,
                     /*force=*/true);
    progress_.Finish();
  }
  report_.steps = trainer_->steps_done();
  if (report_.steps == 0) {
    return absl::FailedPreconditionError(absl::StrCat("no training batches in ",
                                                      spec_.train_paths.front(), " (",
                                                      spec_.train_paths.size(), " file(s))"));
  }
  if (checkpointer_ == nullptr) {
    // A diverged model is no result: refused before its evaluation. With a checkpoint folder the
    // last checkpoint refuses it (DenseBytes checks; one cut at this step already did).
    DLRM_RETURN_IF_ERROR(trainer_->CheckDenseParamsFinite());
  }
  // The trained model is always kept when the spec names a checkpoint folder.
  // Training is over: the last checkpoint is written from the tables themselves, no copy.
  if (checkpointer_ != nullptr && checkpointer_->last_step() < position_.step) {
    DLRM_RETURN_IF_ERROR(StartCheckpoint(/*last=*/true));
  }
  if (checkpointer_ != nullptr && checkpointer_->writing()) {
    DLRM_ASSIGN_OR_RETURN(CheckpointWriteResult last, checkpointer_->Finish());
    (void)last;
  }
  report_.skipped_lines = input_.train->skipped();
  if (input_.eval != nullptr) {
    DLRM_ASSIGN_OR_RETURN(EvalMetrics m, Evaluate());
    report_.auc = m.auc;
    report_.logloss = m.logloss;
    report_.accuracy = m.accuracy;
    report_.eval_samples = m.samples;
    // The eval split's lines (and those after the data's last record, which its reader reads).
    report_.skipped_lines += input_.eval->skipped();
  } else {
    // Not evaluated: no numbers that could pass for results (null in the JSON).
    report_.auc = report_.logloss = report_.accuracy = std::numeric_limits<double>::quiet_NaN();
    report_.eval_samples = 0;
    DLRM_LOG(WARNING) << "no eval data (" << NoEvalReason(spec_, input_.train_records)
                      << "): the model was not evaluated";
  }
  if (artifacts != nullptr) {
    dense::DlrmDenseModel& model = trainer_->model();
    artifacts->dense_params.resize(model.num_params());
    backend_->CopyToHost(model.params(), artifacts->dense_params.data(), model.num_params());
    DLRM_RETURN_IF_ERROR(trainer_->CopyEmbeddingsToStore());
    trainer_.reset();
    artifacts->store = std::move(store_);
  }
  return report_;
}

}  // namespace

absl::StatusOr<TrainReport> TrainInProcess(const common::JobSpec& spec,
                                           const TrainRunOptions& options,
                                           TrainArtifacts* artifacts) {
  InProcessRun run(spec, options);
  DLRM_RETURN_IF_ERROR(run.SetUp());
  DLRM_RETURN_IF_ERROR(run.Restore());
  DLRM_RETURN_IF_ERROR(run.CreateCheckpointer());
  DLRM_RETURN_IF_ERROR(run.Train());
  return run.Finish(artifacts);
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

// --metrics-out, before any work: writable, and none of the files the command reads.
absl::Status CheckMetricsOut(const std::string& path, const std::vector<std::string>& inputs) {
  DLRM_RETURN_IF_ERROR(CheckOutputPath(path, "--metrics-out"));
  return CheckOutputIsNotAnInput(path, "--metrics-out", inputs);
}

// The summary line of a run; "n/a" for metrics of a model that was not evaluated.
std::string SummaryLine(const TrainReport& report) {
  if (report.eval_samples > 0) return TrainReportSummary(report);
  return absl::StrFormat(
      "AUC n/a  logloss n/a  accuracy n/a  (no eval data; %d steps, %.0f samples/s)", report.steps,
      report.samples_per_sec);
}

}  // namespace

absl::Status CheckRunOutputs(const std::string& config_path, const common::JobSpec& spec,
                             const std::string& metrics_out, const std::string& report,
                             const std::string& resume_from) {
  // A checkpoint's files are written by the run or read to resume it: an output among them
  // replaced dense.bin or MANIFEST.json, and the checkpoint was lost.
  const std::pair<const char*, std::string> folders[] = {
      {"checkpoint.dir", spec.checkpoint.dir},
      {"checkpoint.resume_from", spec.checkpoint.resume_from},
      {"--resume", resume_from}};
  for (const auto& [what, output] :
       {std::pair<const char*, std::string>{"--report", report}, {"--metrics-out", metrics_out}}) {
    if (output.empty()) continue;
    for (const auto& [key, folder] : folders) {
      if (!folder.empty() && common::PathIsWithin(output, folder)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " '", output, "' lies in the checkpoint folder '", folder, "' (", key,
            "): it would replace a "
            "checkpoint's file; write it elsewhere"));
      }
    }
  }
  // The files the run reads: neither output may replace one (--report over the spec or the
  // training data destroyed it).
  std::vector<std::string> inputs = {config_path};
  inputs.insert(inputs.end(), spec.train_paths.begin(), spec.train_paths.end());
  inputs.insert(inputs.end(), spec.eval_paths.begin(), spec.eval_paths.end());
  if (!report.empty()) {
    DLRM_RETURN_IF_ERROR(CheckOutputPath(report, "--report"));
    DLRM_RETURN_IF_ERROR(CheckOutputIsNotAnInput(report, "--report", inputs));
  }
  if (!metrics_out.empty()) DLRM_RETURN_IF_ERROR(CheckMetricsOut(metrics_out, inputs));
  if (!report.empty() && !metrics_out.empty() && common::SamePath(report, metrics_out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--report '", report, "' and --metrics-out '", metrics_out,
                     "' are the same file: the page would replace the metrics; give two paths"));
  }
  return absl::OkStatus();
}

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
  DLRM_RETURN_IF_ERROR(CheckRunOutputs(options.config_path, spec, options.metrics_out,
                                       options.report, options.run.resume_from));
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
  std::printf("%s\n", SummaryLine(report).c_str());
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
  // Every file of the checkpoint's chain, manifests included: outputs must not replace one.
  std::vector<std::string> files;
};

// `activity`: what the model is loaded for, in the log ("evaluating", "scoring").
absl::StatusOr<CheckpointModel> LoadCheckpointModel(const CheckpointModelOptions& options,
                                                    const std::string& activity) {
  // Verified once: RestoreCheckpoint below loads this chain without checksumming it again.
  DLRM_ASSIGN_OR_RETURN(ValidCheckpoint checkpoint, FindValidCheckpoint(options.checkpoint));
  const std::string& dir = checkpoint.dir;
  const embedding::CheckpointManifest& manifest = checkpoint.chain.back();
  CheckpointModel m;
  const std::filesystem::path folder = std::filesystem::path(dir).parent_path();
  for (const embedding::CheckpointManifest& link : checkpoint.chain) {
    // Each link is found next to the checkpoint by its name, the checkpoint itself at `dir`.
    const std::filesystem::path link_dir =
        &link == &manifest ? std::filesystem::path(dir) : folder / link.name;
    m.files.push_back((link_dir / embedding::kManifestName).string());
    for (const auto& f : link.files) m.files.push_back((link_dir / f.name).string());
  }
  DLRM_ASSIGN_OR_RETURN(m.spec,
                        common::ParseJobSpec(manifest.spec_yaml, absl::StrCat(dir, " (job spec)")));
  DLRM_ASSIGN_OR_RETURN(m.backend, CreateBackendForDevice(options.device, m.spec.math_mode,
                                                          options.threads, 0, activity));
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
                        RestoreCheckpoint(checkpoint, {}, m.trainer.get(), m.store.get()));
  DLRM_LOG(INFO) << "model of " << restored.dir << " (job '" << m.spec.name << "', step "
                 << restored.manifest.step << ")";
  return m;
}

// `by_line`: every line of TSV data is a record (predict: strict, and an empty line is malformed).
absl::StatusOr<std::unique_ptr<BatchReader>> OpenScoringInput(const CheckpointModel& model,
                                                              const std::vector<std::string>& data,
                                                              bool by_line) {
  BatchReaderOptions reader;
  // Each file's own format, from its first bytes: the model's training data format (the spec's
  // data.format) says nothing about the data it scores.
  reader.format = InputFormat::kAuto;
  reader.paths = data;
  reader.batch_size = model.spec.batch_size;
  reader.strict = by_line;
  reader.blank_lines_are_malformed = by_line;
  // Scores need no label: Criteo's test files (Kaggle's test.txt) have none.
  reader.labels_optional = by_line;
  for (const auto& t : model.spec.tables) reader.table_rows.push_back(t.rows);
  return BatchReader::Create(reader);
}

}  // namespace

absl::StatusOr<EvalMetrics> RunEvalCommand(const CheckpointModelOptions& options,
                                           const std::string& metrics_out) {
  if (options.data.empty()) return absl::InvalidArgumentError("--data: no input file");
  if (!metrics_out.empty()) DLRM_RETURN_IF_ERROR(CheckMetricsOut(metrics_out, options.data));
  DLRM_ASSIGN_OR_RETURN(CheckpointModel model, LoadCheckpointModel(options, "evaluating"));
  if (!metrics_out.empty()) {
    DLRM_RETURN_IF_ERROR(CheckOutputIsNotAnInput(metrics_out, "--metrics-out", model.files));
  }
  DLRM_ASSIGN_OR_RETURN(auto reader, OpenScoringInput(model, options.data, /*by_line=*/false));
  absl::StatusOr<EvalMetrics> evaluated = model.trainer->Evaluate(reader.get());
  if (!evaluated.ok() && evaluated.status().code() == absl::StatusCode::kFailedPrecondition &&
      reader->records_read() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data: no valid records in ", absl::StrJoin(options.data, ", "), " (",
                     reader->skipped(), " malformed line(s) skipped): nothing to evaluate"));
  }
  DLRM_ASSIGN_OR_RETURN(EvalMetrics m, std::move(evaluated));
  TrainReport report;
  report.auc = m.auc;
  report.logloss = m.logloss;
  report.accuracy = m.accuracy;
  report.eval_samples = m.samples;
  report.steps = model.trainer->steps_done();
  report.skipped_lines = reader->skipped();
  std::printf("AUC %s  logloss %.4f  accuracy %.4f  (%lld samples, model of step %lld)\n",
              FormatAuc(m.auc).c_str(), m.logloss, m.accuracy, static_cast<long long>(m.samples),
              static_cast<long long>(report.steps));
  std::fflush(stdout);
  if (report.skipped_lines > 0) {
    DLRM_LOG(WARNING) << report.skipped_lines << " malformed line(s) skipped";
  }
  if (!metrics_out.empty()) DLRM_RETURN_IF_ERROR(WriteTrainReport(metrics_out, report));
  return m;
}

absl::Status RunPredictCommand(const CheckpointModelOptions& options, const std::string& out) {
  if (options.data.empty()) return absl::InvalidArgumentError("--data: no input file");
  // Before the model is loaded: a path that cannot be written, or the data itself.
  DLRM_RETURN_IF_ERROR(CheckOutputPath(out, "--out"));
  DLRM_RETURN_IF_ERROR(CheckOutputIsNotAnInput(out, "--out", options.data));
  DLRM_ASSIGN_OR_RETURN(CheckpointModel model, LoadCheckpointModel(options, "scoring"));
  DLRM_RETURN_IF_ERROR(CheckOutputIsNotAnInput(out, "--out", model.files));
  DLRM_ASSIGN_OR_RETURN(auto reader, OpenScoringInput(model, options.data, /*by_line=*/true));
  std::vector<float> scores;
  std::vector<float> labels;
  DLRM_RETURN_IF_ERROR(model.trainer->Predict(reader.get(), &scores, &labels));
  // Opened once the scores are known: a FIFO's reader sees them all at once, and a failed run
  // leaves the old file.
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> file, OutputFile::Open(out, "--out"));
  std::string text;
  constexpr size_t kChunkBytes = 1 << 20;
  text.reserve(kChunkBytes + 32);
  char line[32];
  for (float s : scores) {
    const int n = std::snprintf(line, sizeof(line), "%.9g\n", s);
    text.append(line, static_cast<size_t>(n));
    if (text.size() >= kChunkBytes) {
      DLRM_RETURN_IF_ERROR(file->Write(text));
      text.clear();
    }
  }
  DLRM_RETURN_IF_ERROR(file->Write(text));
  DLRM_RETURN_IF_ERROR(file->Commit());
  std::fprintf(stderr, "wrote %zu scores to %s\n", scores.size(), out.c_str());
  return absl::OkStatus();
}

}  // namespace dlrm::worker
