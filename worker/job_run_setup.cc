// WorkerProcess::JobRun::SetUp (job_run.h): a run's parameter servers, collectives, input and
// trainer, the checkpoint it resumes from, its hot rows and its checkpointer.
#include <algorithm>
#include <optional>
#include <utility>

#include "worker/job_run.h"
#include "worker/local_devices.h"

namespace dlrm::worker {

using job_run_internal::kPsRetryBudget;

absl::Status WorkerProcess::JobRun::SetUp() {
  DLRM_ASSIGN_OR_RETURN(submitted_,
                        common::ParseJobSpec(job_.job_spec_yaml(), absl::StrCat("job ", job_id_)));
  // training.batch_size is the job's global batch: this rank trains on its share of every step,
  // and the gradients are averaged over the ranks (Trainer), so the model is the one a single
  // process trains. Everything below reads its batch size from `spec_`.
  spec_ = submitted_;
  DLRM_ASSIGN_OR_RETURN(spec_.batch_size, common::WorkerBatchSize(submitted_, world_));
  if (job_.ps_addresses_size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_, ": no parameter-server addresses"));
  }
  const WorkerProcessOptions& options = worker_.options_;
  DLRM_ASSIGN_OR_RETURN(
      const std::string device,
      WorkerTrainingDevice(options.device, options.cuda_device, spec_.device,
                           "--cuda-device -1: dlrm local starts its workers so when there are "
                           "fewer GPUs than workers"));
  DLRM_ASSIGN_OR_RETURN(resources_->backend,
                        CreateBackendForDevice(device, spec_.math_mode, options.threads,
                                               std::max(0, options.cuda_device)));
  DLRM_RETURN_IF_ERROR(ConnectStore());
  DLRM_RETURN_IF_ERROR(ConnectPeers());

  DLRM_ASSIGN_OR_RETURN(
      input_, OpenJobInput(spec_, {.rank = rank_, .world_size = world_, .even_shards = true}));
  TrainerOptions trainer_options;
  trainer_options.spec = spec_;
  trainer_options.backend = resources_->backend.get();
  trainer_options.store = store_.get();
  trainer_options.allreducer = reducer_;
  trainer_options.device_allreducer = resources_->nccl.get();
  trainer_options.hot_allreducer = hot_reducer_;
  trainer_options.overlap_dense_allreduce = options.overlap_dense_allreduce;
  trainer_options.threads = options.threads;
  DLRM_ASSIGN_OR_RETURN(trainer_, Trainer::Create(trainer_options));

  DLRM_RETURN_IF_ERROR(Restore());
  DLRM_RETURN_IF_ERROR(SetUpHotRows());
  DLRM_RETURN_IF_ERROR(CreateCheckpointer());
  metrics_ = RegisterWorkerMetrics(options.metrics);
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::ConnectStore() {
  const WorkerProcessOptions& options = worker_.options_;
  // The embedding tables live on the parameter servers.
  PsClientOptions ps_options;
  ps_options.ps_addresses.assign(job_.ps_addresses().begin(), job_.ps_addresses().end());
  ps_options.job_id = job_id_;
  ps_options.security = options.security;
  ps_options.job_epoch = job_.job_epoch();
  ps_options.worker_rank = rank_;
  ps_options.job_grants.assign(assignment_.job_grants().begin(), assignment_.job_grants().end());
  ps_options.member_grants.assign(assignment_.member_grants().begin(),
                                  assignment_.member_grants().end());
  // A parameter server refusing connections for this long is gone: the run fails with the peer
  // lost and the job recovers at once, not when the server's lease runs out (14 s).
  ps_options.retry_budget = kPsRetryBudget;
  ps_options.tables = TableConfigsFromSpec(spec_);
  ps_options.load_grants.assign(assignment_.load_grants().begin(), assignment_.load_grants().end());
  // After a recovery the job starts over from its checkpoint: the servers drop what an older
  // epoch left in its tables. The coordinator signs the same parameters (load_grants).
  DLRM_ASSIGN_OR_RETURN(const PsJobParams ps_params,
                        server::PsJobParamsFromSpec(spec_, world_, job_.recovery() > 0));
  DLRM_ASSIGN_OR_RETURN(store_, GrpcPsClient::Create(ps_options));
  // From here on, stopping the run also cancels the store's calls (a retry against a server that
  // is gone, a checkpoint write), so that a recovery does not wait for their deadlines.
  store_hook_ = [w = &worker_, s = store_.get()] {
    w->cancel_job_.store(true);
    s->Cancel();
  };
  {
    absl::MutexLock lock(&worker_.mu_);
    if (worker_.stopping_ || worker_.cancel_job_.load()) {
      return absl::CancelledError("job stopped");
    }
    worker_.cancel_hook_ = store_hook_;
    hook_installed_ = true;
  }
  return store_->LoadJobOnAll(ps_params);
}

absl::Status WorkerProcess::JobRun::ConnectPeers() {
  const WorkerProcessOptions& options = worker_.options_;
  dense::Backend* backend = resources_->backend.get();
  // Collectives: NCCL between GPU workers (dense gradients summed in device memory; hot-row
  // gradients and barriers staged through it), Gloo between CPU workers. Both rendezvous through
  // the coordinator's key-value store under a job-scoped prefix.
  if (world_ > 1 && backend->device() == dense::Device::kCuda && NcclAllReducer::Available()) {
    client::CoordinatorClient* client = worker_.client_.get();
    const absl::Duration timeout = options.collective_timeout;
    DLRM_ASSIGN_OR_RETURN(
        resources_->nccl,
        NcclAllReducer::Create(
            {.backend = backend,
             .rank = rank_,
             .world_size = world_,
             .key = absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/nccl/unique_id"),
             .publish = [client](const std::string& key,
                                 const std::string& value) { return client->KvSet(key, value); },
             .fetch = [w = &worker_](const std::string& key) { return w->KvGetUntilStopped(key); },
             .init_timeout = timeout}));
    reducer_ = resources_->nccl.get();
    DLRM_LOG(INFO) << "job " << job_id_ << ": NCCL allreduce, rank " << rank_ << " of " << world_;
  } else if (world_ > 1) {
    // A job's Gloo connections, under a rendezvous prefix of their own (`name`).
    auto connect = [&](const std::string& name) {
      return GlooAllReducer::Create(
          {.client = worker_.client_.get(),
           .prefix = absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/", name, "/"),
           .rank = rank_,
           .world_size = world_,
           .hostname = options.advertise_host,
           .rendezvous_timeout = options.collective_timeout,
           .op_timeout = options.collective_timeout,
           .cancelled = [w = &worker_] { return w->cancel_job_.load(); },
           .direct_max_bytes =
               options.direct_collectives ? std::nullopt : std::optional<size_t>(0)});
    };
    DLRM_ASSIGN_OR_RETURN(resources_->gloo, connect("gloo"));
    reducer_ = resources_->gloo.get();
    if (options.overlap_hot_exchange && options.use_hot_rows && spec_.hot_budget_bytes != 0 &&
        spec_.staleness >= 1) {
      // A second mesh of connections, so that the exchange's collectives never interleave with
      // the compute thread's on one context.
      DLRM_ASSIGN_OR_RETURN(resources_->hot_gloo, connect("gloo-hot"));
    }
  }
  hot_reducer_ = resources_->hot_gloo.get();
  return absl::OkStatus();
}

absl::Status WorkerProcess::JobRun::Restore() {
  // Where this run starts: the spec's resume_from, or after a recovery the newest checkpoint of
  // this job in its folder that verifies (another job's, one given the same folder by mistake,
  // is never this job's model; with none of its own it starts again from resume_from). Rank 0
  // chooses; the others take its choice, so every rank
  // loads the same one even while a checkpoint is being committed.
  client::CoordinatorClient* client = worker_.client_.get();
  std::string resume_from = spec_.checkpoint.resume_from;
  // Rank 0's choice after a recovery, its files verified: loaded without checksumming them again.
  std::optional<ValidCheckpoint> chosen_newest;
  if (job_.recovery() > 0 && !spec_.checkpoint.dir.empty()) {
    const std::string key = absl::StrCat("job/", job_id_, "/", job_.job_epoch(), "/resume_from");
    if (rank_ == 0) {
      absl::StatusOr<ValidCheckpoint> newest = FindValidCheckpoint(spec_.checkpoint.dir, job_id_);
      if (newest.ok()) {
        resume_from = newest->dir;
        chosen_newest = *std::move(newest);
      } else if (!absl::IsNotFound(newest.status())) {
        return newest.status();
      }
      if (world_ > 1) DLRM_RETURN_IF_ERROR(client->KvSet(key, "path:" + resume_from));
    } else {
      // In short waits that end with the job: a rank 0 that died before its word never sends it.
      DLRM_ASSIGN_OR_RETURN(std::string chosen, worker_.KvGetUntilStopped(key));
      resume_from = std::string(absl::StripPrefix(chosen, "path:"));
    }
    DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_ << ": recovery " << job_.recovery()
                   << " rolls back to "
                   << (resume_from.empty() ? std::string("the start") : resume_from);
  }
  // Resuming: rank 0 loads every row onto the parameter servers (through the client, which
  // places each row on its shard, whatever the number of servers that wrote it); every rank
  // loads the dense state. Steps on the servers start again from 0; `base_` is where this run
  // starts in the job's numbering.
  resumed_ = !resume_from.empty();
  if (!resumed_) return absl::OkStatus();
  const RestoreOptions restore_options{
      .rank = rank_, .world_size = world_, .load_rows = rank_ == 0, .set_steps = false};
  DLRM_ASSIGN_OR_RETURN(
      RestoredCheckpoint restored,
      chosen_newest.has_value()
          ? RestoreCheckpoint(*chosen_newest, restore_options, trainer_.get(), store_.get())
          : RestoreCheckpoint(resume_from, restore_options, trainer_.get(), store_.get()));
  base_ = restored.position;
  base_.samples = restored.manifest.samples;
  restored_from_ = restored.dir;
  resumed_hot_ids_ = std::move(restored.hot_ids);
  // A step is a global batch whatever the number of workers: with another number, each rank
  // skips the same number of (smaller or larger) batches of its new shard, the same share.
  DLRM_RETURN_IF_ERROR(Barrier());  // the rows are on the servers before anyone reads them
  DLRM_LOG(INFO) << "job " << job_id_ << " rank " << rank_ << ": resumed from " << restored.dir
                 << " at step " << base_.step << " (epoch " << base_.epoch + 1 << ", "
                 << base_.batches << " batch(es) into it)";
  return absl::OkStatus();
}

// Rank 0's checkpoint writer waits for the other ranks' keys in short waits, so that a stopped
// job (a rank is gone and the job recovers) does not wait out the collective timeout.
absl::Status WorkerProcess::JobRun::CreateCheckpointer() {
  if (spec_.checkpoint.dir.empty()) return absl::OkStatus();
  if (rank_ == 0 && job_.recovery() == 0) {
    // The job's first run: its folder must not hold another run's newer checkpoints (a
    // recovery of this job takes the folder's newest). Later runs find the job's own there.
    DLRM_RETURN_IF_ERROR(CheckNoNewerCheckpoints(spec_.checkpoint.dir, base_.step));
  }
  client::CoordinatorClient* client = worker_.client_.get();
  DLRM_ASSIGN_OR_RETURN(
      checkpointer_,
      ClusterCheckpointer::Create(
          {.spec = submitted_,
           .job_id = job_id_,
           .rank = rank_,
           .world_size = world_,
           .ps = store_.get(),
           .base_step = base_.step,
           .metrics = worker_.options_.metrics,
           .kv_set = [client](const std::string& key,
                              const std::string& value) { return client->KvSet(key, value); },
           .kv_get = [this](const std::string& key) { return worker_.KvGetUntilStopped(key); },
           .kv_delete_prefix =
               [client](const std::string& prefix) { (void)client->KvDelete(prefix, true); },
           .job_epoch = job_.job_epoch()}));
  return absl::OkStatus();
}

}  // namespace dlrm::worker
