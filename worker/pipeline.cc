#include "worker/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/thread_name.h"
#include "worker/bounded_queue.h"

namespace dlrm::worker {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t TotalIds(const std::vector<embedding::TableRows>& rows) {
  int64_t n = 0;
  for (const auto& r : rows) n += static_cast<int64_t>(r.ids.size());
  return n;
}

}  // namespace

// One batch on its way through the stages.
struct TrainingPipeline::StepItem {
  int64_t step = 0;
  Batch batch;
  SparseWork work;
  // Lookahead split: the ids that must wait for the push of step - 1 - k (one entry per table
  // that has any), and where they go: work.rows[late_row[i]].ids[late_pos[i][j]].
  std::vector<embedding::TableRows> late;
  std::vector<size_t> late_row;
  std::vector<std::vector<int64_t>> late_pos;
  // Every update of steps <= visible_step to the rows read had been applied when they were read.
  int64_t visible_step = -1;
  float loss = 0;
};

class TrainingPipeline::Queue : public BoundedQueue<std::unique_ptr<StepItem>> {
 public:
  using BoundedQueue::BoundedQueue;
};

PipelineOptions PipelineOptionsFromSpec(const common::JobSpec& spec) {
  PipelineOptions o;
  o.staleness = spec.staleness;
  o.epochs = spec.epochs;
  o.max_steps = spec.max_steps;
  return o;
}

absl::StatusOr<std::unique_ptr<TrainingPipeline>> TrainingPipeline::Create(
    const PipelineOptions& options) {
  if (options.trainer == nullptr || options.store == nullptr || options.reader == nullptr) {
    return absl::InvalidArgumentError("training pipeline needs a trainer, a store and a reader");
  }
  auto check = [](bool ok, const char* name, int64_t value, const char* want) {
    return ok ? absl::OkStatus()
              : absl::InvalidArgumentError(
                    absl::StrCat("pipeline option ", name, " = ", value, "; must be ", want));
  };
  DLRM_RETURN_IF_ERROR(check(options.staleness >= 0, "staleness", options.staleness, ">= 0"));
  DLRM_RETURN_IF_ERROR(check(options.epochs >= 1, "epochs", options.epochs, ">= 1"));
  DLRM_RETURN_IF_ERROR(check(options.max_steps >= 0, "max_steps", options.max_steps, ">= 0"));
  DLRM_RETURN_IF_ERROR(check(options.read_ahead >= 1, "read_ahead", options.read_ahead, ">= 1"));
  DLRM_RETURN_IF_ERROR(
      check(options.queue_capacity >= 1, "queue_capacity", options.queue_capacity, ">= 1"));
  DLRM_RETURN_IF_ERROR(
      check(options.boundary_every >= 0, "boundary_every", options.boundary_every, ">= 0"));
  return std::unique_ptr<TrainingPipeline>(new TrainingPipeline(options));
}

TrainingPipeline::TrainingPipeline(const PipelineOptions& options)
    : options_(options), recorder_(options.metrics) {
  for (int q = 0; q < kNumPipelineQueues; ++q) {
    queues_.push_back(
        std::make_unique<Queue>(q == 0 ? options.read_ahead : options.queue_capacity));
    queues_.back()->SetDepthObserver(
        [this, q](size_t depth) { recorder_.SetQueueDepth(q, static_cast<int64_t>(depth)); });
  }
}

TrainingPipeline::~TrainingPipeline() = default;

void TrainingPipeline::Cancel() { Fail(absl::CancelledError("training pipeline cancelled")); }

void TrainingPipeline::Fail(absl::Status status, bool drop_computed) {
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = status;
    pushed_cv_.SignalAll();
  }
  // The queue of computed steps is left to drain (the compute thread closes it once its input is
  // cancelled), so that every step whose dense update was applied also has its embedding update.
  const size_t n = drop_computed ? queues_.size() : queues_.size() - 1;
  for (size_t q = 0; q < n; ++q) queues_[q]->Cancel(status);
}

bool TrainingPipeline::Failed() const {
  absl::MutexLock lock(&mu_);
  return !error_.ok();
}

absl::StatusOr<int64_t> TrainingPipeline::WaitPushed(int64_t step, double* stall) {
  absl::MutexLock lock(&mu_);
  if (error_.ok() && last_pushed_ < step) {
    const auto start = std::chrono::steady_clock::now();
    while (error_.ok() && last_pushed_ < step) pushed_cv_.Wait(&mu_);
    const double waited = SecondsSince(start);
    *stall += waited;
    recorder_.AddStalenessWait(waited);
  }
  if (!error_.ok()) return error_;
  return last_pushed_;
}

absl::StatusOr<int64_t> TrainingPipeline::WaitComputed(int64_t step, double* stall) {
  absl::MutexLock lock(&mu_);
  if (error_.ok() && last_computed_ < step) {
    const auto start = std::chrono::steady_clock::now();
    while (error_.ok() && last_computed_ < step) pushed_cv_.Wait(&mu_);
    const double waited = SecondsSince(start);
    *stall += waited;
    recorder_.AddStalenessWait(waited);
  }
  if (!error_.ok()) return error_;
  return last_pushed_;
}

absl::Status TrainingPipeline::Lookup(int64_t step, absl::Span<embedding::TableRows> requests) {
  absl::Status looked_up = options_.store->Lookup(step, requests);
  if (looked_up.ok()) return looked_up;
  return Annotate(looked_up, absl::StrCat("lookup of step ", JobStep(step)));
}

absl::Status TrainingPipeline::Run() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("TrainingPipeline::Run called twice");
    started_ = true;
    if (!error_.ok()) return error_;
    first_step_ = options_.trainer->steps_done();
    last_pushed_ = first_step_ - 1;
    last_computed_ = first_step_ - 1;
  }
  std::vector<std::thread> threads;
  threads.emplace_back([this] {
    common::NameThisThread("dlrm-read");
    ReadLoop();
  });
  threads.emplace_back([this] {
    common::NameThisThread("dlrm-prepare");
    StageLoop(PipelineStage::kPrepare, [this](StepItem& item, double*) { return Prepare(item); });
  });
  threads.emplace_back([this] {
    common::NameThisThread("dlrm-prefetch");
    StageLoop(PipelineStage::kPrefetch,
              [this](StepItem& item, double* stall) { return Prefetch(item, stall); });
  });
  threads.emplace_back([this] {
    common::NameThisThread("dlrm-fetch");
    StageLoop(PipelineStage::kFetch,
              [this](StepItem& item, double* stall) { return FetchLate(item, stall); });
  });
  threads.emplace_back([this] {
    common::NameThisThread("dlrm-compute");
    StageLoop(PipelineStage::kCompute, [this](StepItem& item, double*) { return Compute(item); });
  });
  threads.emplace_back([this] {
    common::NameThisThread("dlrm-push");
    PushLoop();
  });
  for (auto& t : threads) t.join();
  absl::MutexLock lock(&mu_);
  return error_;
}

void TrainingPipeline::ReadLoop() {
  Queue* out = queues_.front().get();
  int64_t step = first_step_;
  // The boundary before `step` was decided (and run when needed): an epoch that ends right after
  // a boundary comes back to the same step after the rewind, and must not decide it again (a
  // second, different, answer of boundary_needed would part the ranks).
  int64_t decided = first_step_;
  auto max_steps_done = [&] {
    return options_.max_steps > 0 && step - first_step_ >= options_.max_steps;
  };
  for (int epoch = 0; epoch < options_.epochs; ++epoch) {
    // The reader stays where the last step left it: a checkpoint records that position.
    if (max_steps_done()) break;
    if (epoch > 0) {
      const auto start = std::chrono::steady_clock::now();
      absl::Status s = options_.reader->Rewind();
      recorder_.AddBusy(PipelineStage::kRead, SecondsSince(start));
      if (!s.ok()) return Fail(Annotate(s, "rewinding the training data"));
    }
    while (!max_steps_done()) {
      bool boundary = options_.boundary_every > 0 && options_.on_boundary && step > decided &&
                      step % options_.boundary_every == 0;
      decided = std::max(decided, step);
      if (boundary && options_.boundary_needed) {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<bool> needed = options_.boundary_needed(step);
        recorder_.AddStall(PipelineStage::kRead, SecondsSince(start));
        if (!needed.ok()) {
          return Fail(Annotate(needed.status(),
                               absl::StrCat("deciding the boundary before step ", JobStep(step))));
        }
        boundary = *needed;
      }
      if (boundary) {
        double stall = 0;
        if (!WaitPushed(step - 1, &stall).ok()) return;  // the pipeline failed
        recorder_.AddStall(PipelineStage::kRead, stall);
        const auto start = std::chrono::steady_clock::now();
        absl::Status s = options_.on_boundary(step);
        recorder_.AddBusy(PipelineStage::kRead, SecondsSince(start));
        if (!s.ok())
          return Fail(Annotate(s, absl::StrCat("at the boundary before step ", JobStep(step))));
      }
      auto item = std::make_unique<StepItem>();
      item->step = step;
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<bool> more = options_.reader->Next(&item->batch);
      recorder_.AddBusy(PipelineStage::kRead, SecondsSince(start));
      if (!more.ok()) {
        return Fail(Annotate(more.status(), absl::StrCat("reading batch of step ", JobStep(step))));
      }
      if (!*more) break;
      double stall = 0;
      absl::Status pushed = out->Push(std::move(item), &stall);
      recorder_.AddStall(PipelineStage::kRead, stall);
      if (!pushed.ok()) return;  // the pipeline failed
      recorder_.AddItem(PipelineStage::kRead);
      ++step;
    }
  }
  out->Close();
}

void TrainingPipeline::StageLoop(
    PipelineStage stage, const std::function<absl::Status(StepItem&, double* stall)>& work) {
  const int s = static_cast<int>(stage);
  Queue* in = queues_[s - 1].get();
  Queue* out = queues_[s].get();
  while (true) {
    double stall = 0;
    std::optional<std::unique_ptr<StepItem>> item = in->Pop(&stall);
    if (!item.has_value()) {
      recorder_.AddStall(stage, stall);
      break;  // end of data, or the pipeline failed
    }
    const auto start = std::chrono::steady_clock::now();
    double work_stall = 0;
    absl::Status status = work(**item, &work_stall);
    recorder_.AddBusy(stage, SecondsSince(start) - work_stall);
    stall += work_stall;
    if (!status.ok()) {
      recorder_.AddStall(stage, stall);
      Fail(status);
      break;
    }
    absl::Status pushed = out->Push(std::move(*item), &stall);
    recorder_.AddStall(stage, stall);
    if (!pushed.ok()) break;
    recorder_.AddItem(stage);
  }
  // Always: the consumer of a queue that is not cancelled (the push stage) waits for this.
  out->Close();
}

absl::Status TrainingPipeline::Prepare(StepItem& item) {
  if (absl::Status checked = options_.trainer->CheckBatch(item.batch); !checked.ok()) {
    return Annotate(checked, absl::StrCat("batch of step ", JobStep(item.step)));
  }
  options_.trainer->PrepareSparse(item.batch, item.step, &item.work);
  return absl::OkStatus();
}

absl::Status TrainingPipeline::Prefetch(StepItem& item, double* stall) {
  const int64_t t = item.step;
  const int64_t bound = t - 1 - options_.staleness;  // pushes <= bound must be visible
  std::vector<embedding::TableRows>& rows = item.work.rows;
  const int64_t total = TotalIds(rows);
  item.late.clear();
  item.late_row.clear();
  item.late_pos.clear();
  if (options_.store_enforces_staleness) {
    recorder_.AddLookahead(0, total);  // all looked up by FetchLate, held by the store
    return absl::OkStatus();
  }
  if (!options_.lookahead) {
    DLRM_ASSIGN_OR_RETURN(item.visible_step, WaitPushed(bound, stall));
    DLRM_RETURN_IF_ERROR(Lookup(t, absl::MakeSpan(rows)));
    recorder_.AddLookahead(0, total);
    return absl::OkStatus();
  }

  // Pushes <= bound - 1 are complete once this returns, so only step `bound` can be pending.
  DLRM_ASSIGN_OR_RETURN(const int64_t pushed, WaitPushed(bound - 1, stall));
  const std::vector<std::vector<int64_t>>* pending = nullptr;
  if (pushed < bound) {
    for (const auto& [step, ids] : recent_ids_) {
      if (step == bound) pending = &ids;
    }
    DLRM_CHECK(pending != nullptr) << "ids of step " << bound << " not kept";
  }
  if (pending == nullptr) {
    DLRM_RETURN_IF_ERROR(Lookup(t, absl::MakeSpan(rows)));
    item.visible_step = pushed;
    recorder_.AddLookahead(total, 0);
  } else {
    // Split every table's ids: those the pending step touched wait for its push (FetchLate).
    std::vector<embedding::TableRows> early;
    std::vector<size_t> early_row;
    std::vector<std::vector<int64_t>> early_pos;
    for (size_t i = 0; i < rows.size(); ++i) {
      const embedding::TableRows& r = rows[i];
      rows[i].values.resize(r.ids.size() * options_.store->tables()[r.table].dim);
      const absl::flat_hash_set<int64_t> touched((*pending)[i].begin(), (*pending)[i].end());
      embedding::TableRows e{.table = r.table, .ids = {}, .values = {}};
      embedding::TableRows l{.table = r.table, .ids = {}, .values = {}};
      std::vector<int64_t> e_pos, l_pos;
      for (size_t j = 0; j < r.ids.size(); ++j) {
        const bool wait = touched.contains(r.ids[j]);
        (wait ? l : e).ids.push_back(r.ids[j]);
        (wait ? l_pos : e_pos).push_back(static_cast<int64_t>(j));
      }
      if (!e.ids.empty()) {
        early.push_back(std::move(e));
        early_row.push_back(i);
        early_pos.push_back(std::move(e_pos));
      }
      if (!l.ids.empty()) {
        item.late.push_back(std::move(l));
        item.late_row.push_back(i);
        item.late_pos.push_back(std::move(l_pos));
      }
    }
    if (!early.empty()) {
      DLRM_RETURN_IF_ERROR(Lookup(t, absl::MakeSpan(early)));
      for (size_t i = 0; i < early.size(); ++i) {
        embedding::TableRows& dst = rows[early_row[i]];
        const int dim = options_.store->tables()[early[i].table].dim;
        for (size_t j = 0; j < early_pos[i].size(); ++j) {
          std::memcpy(dst.values.data() + early_pos[i][j] * dim, early[i].values.data() + j * dim,
                      dim * sizeof(float));
        }
      }
    }
    // With nothing left to wait for, the rows read are those a lookup after the push of `bound`
    // would have read.
    item.visible_step = item.late.empty() ? bound : -1;
    const int64_t late = TotalIds(item.late);
    recorder_.AddLookahead(total - late, late);
  }

  // Keep this step's ids for the split of step t + 1 + k.
  std::vector<std::vector<int64_t>> ids(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) ids[i] = rows[i].ids;
  recent_ids_.emplace_back(t, std::move(ids));
  while (!recent_ids_.empty() && recent_ids_.front().first < t - options_.staleness) {
    recent_ids_.pop_front();
  }
  return absl::OkStatus();
}

absl::Status TrainingPipeline::FetchLate(StepItem& item, double* stall) {
  const int64_t t = item.step;
  if (options_.store_enforces_staleness) {
    // Send once step t-1-k is computed: its push is then sent or queued, and the store holds
    // this lookup until that push is applied.
    const int64_t bound = t - 1 - options_.staleness;
    DLRM_ASSIGN_OR_RETURN(const int64_t pushed, WaitComputed(bound, stall));
    DLRM_RETURN_IF_ERROR(Lookup(t, absl::MakeSpan(item.work.rows)));
    item.visible_step = std::max(bound, pushed);
  } else if (!item.late.empty()) {
    DLRM_ASSIGN_OR_RETURN(item.visible_step, WaitPushed(t - 1 - options_.staleness, stall));
    DLRM_RETURN_IF_ERROR(Lookup(t, absl::MakeSpan(item.late)));
    std::vector<embedding::TableRows>& rows = item.work.rows;
    for (size_t i = 0; i < item.late.size(); ++i) {
      const embedding::TableRows& src = item.late[i];
      embedding::TableRows& dst = rows[item.late_row[i]];
      const int dim = options_.store->tables()[src.table].dim;
      for (size_t j = 0; j < item.late_pos[i].size(); ++j) {
        std::memcpy(dst.values.data() + item.late_pos[i][j] * dim, src.values.data() + j * dim,
                    dim * sizeof(float));
      }
    }
  }
  recorder_.ObserveStaleness(t - 1 - item.visible_step);
  return absl::OkStatus();
}

absl::Status TrainingPipeline::Compute(StepItem& item) {
  absl::StatusOr<float> loss = options_.trainer->Compute(item.batch, &item.work);
  if (!loss.ok())
    return Annotate(loss.status(), absl::StrCat("compute of step ", JobStep(item.step)));
  item.loss = *loss;
  absl::MutexLock lock(&mu_);
  last_computed_ = item.step;
  pushed_cv_.SignalAll();
  return absl::OkStatus();
}

void TrainingPipeline::PushLoop() {
  Queue* in = queues_.back().get();
  StepProgress progress;
  while (true) {
    double stall = 0;
    std::optional<std::unique_ptr<StepItem>> item = in->Pop(&stall);
    recorder_.AddStall(PipelineStage::kPush, stall);
    if (!item.has_value()) return;
    const StepItem& it = **item;
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = options_.trainer->PushGradients(it.work);
    recorder_.AddBusy(PipelineStage::kPush, SecondsSince(start));
    if (!status.ok()) {
      return Fail(Annotate(status, absl::StrCat("push of step ", JobStep(it.step))),
                  /*drop_computed=*/true);
    }
    recorder_.AddItem(PipelineStage::kPush);
    recorder_.AddStep(it.batch.size);
    // on_step before the step counts as pushed: a boundary waiting for it (a checkpoint's cut
    // reads the samples on_step counts) sees its on_step done. The other way round, a cut taken
    // at once recorded the job's samples a batch short.
    if (options_.on_step && !Failed()) {
      progress.step = it.step;
      progress.loss = it.loss;
      progress.batch_size = it.batch.size;
      ++progress.steps_done;
      progress.samples_done += it.batch.size;
      status = options_.on_step(progress);
      if (!status.ok()) return Fail(status);
    }
    {
      absl::MutexLock lock(&mu_);
      last_pushed_ = it.step;
      pushed_cv_.SignalAll();
    }
  }
}

}  // namespace dlrm::worker
