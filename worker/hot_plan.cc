#include "worker/hot_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "embedding/sparse_optimizer.h"

namespace dlrm::worker {
namespace {

std::string Line(const HotPlanCandidate& c) {
  std::string line = absl::StrFormat(
      "%d rows (%.1f MiB): %.0f hot + %.0f cold rows touched, PS %.1f KB + sync %.1f KB, %.3f ms",
      c.rows, static_cast<double>(c.bytes) / (1 << 20), c.hot_rows_per_step, c.cold_rows_per_step,
      c.ps_bytes_per_step / 1e3, c.sync_bytes_per_step / 1e3, c.seconds_per_step * 1e3);
  if (c.migrate_seconds_per_step > 0) {
    absl::StrAppendFormat(&line, " (%.3f ms of it migration)", c.migrate_seconds_per_step * 1e3);
  }
  return line;
}

}  // namespace

HotPlan PlanHotSet(const HotSetSelector& sample, const HotPlanOptions& options,
                   const HotRowCache* current) {
  HotPlan plan;
  plan.hot_ids.resize(sample.tables().size());
  // No more rows than fit in the ceiling can be chosen: only those are ranked in order (a full
  // sort of every sampled id took 20-100 ms of a refresh, while every worker waited).
  int64_t min_row_bytes = std::numeric_limits<int64_t>::max();
  for (size_t t = 0; t < sample.tables().size(); ++t) {
    min_row_bytes = std::min(min_row_bytes, sample.row_bytes(static_cast<int>(t)));
  }
  const size_t limit =
      sample.tables().empty()
          ? 0
          : static_cast<size_t>(std::max<int64_t>(0, options.ceiling_bytes) / min_row_bytes) + 1;
  const bool held_out = sample.slices() >= 2;
  const HotSetSelector::Ranking ranking = sample.RankForPlan(current, limit, held_out);
  const std::vector<HotSetSelector::Ranked>& ranked = ranking.by_count;
  const int dim = sample.tables().empty() ? 1 : sample.tables().front().dim;
  const int world = std::max(1, options.world_size);

  // Prefix sums of the stored bytes, in rank order, and of the worker batches touching a row:
  // held out when the sample has two slices or more (ranked by the even slices' counts, counted
  // in the odd slices), so that rows seen once by chance do not look worth keeping.
  std::vector<int64_t> bytes(ranked.size() + 1, 0);
  size_t fit = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    bytes[i + 1] = bytes[i] + sample.row_bytes(ranked[i].table);
    if (bytes[i + 1] <= options.ceiling_bytes) fit = i + 1;
  }
  const std::vector<HotSetSelector::Ranked>& judged = held_out ? ranking.by_even_count : ranked;
  const double total_presence =
      static_cast<double>(held_out ? ranking.presence_odd : ranking.presence);
  const double slices =
      static_cast<double>(std::max<int64_t>(1, held_out ? sample.slices() / 2 : sample.slices()));
  std::vector<double> presence(judged.size() + 1, 0);
  for (size_t i = 0; i < judged.size(); ++i) {
    presence[i + 1] =
        presence[i] + static_cast<double>(held_out ? judged[i].presence_odd : judged[i].presence);
  }
  std::vector<size_t> sizes = {0};
  for (size_t k = 1024; k < fit; k *= 2) sizes.push_back(k);
  if (fit > 0) sizes.push_back(fit);
  if (options.current_rows > 0 && static_cast<size_t>(options.current_rows) < fit) {
    sizes.push_back(static_cast<size_t>(options.current_rows));
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  }

  const double v = options.value_bytes;
  const double ps_per_row = 2.0 * (8 + v * dim);
  const double sync_per_row =
      4 + static_cast<double>(options.sync_value_bytes) * dim + options.sync_row_extra_bytes;
  double migrate_per_row = 0;
  if (options.current_rows >= 0 && options.refresh_steps > 0) {
    const double row_bytes = sample.tables().empty() ? 0 : static_cast<double>(min_row_bytes);
    migrate_per_row = options.migrate_seconds_per_row > 0
                          ? options.migrate_seconds_per_row
                          : (8 + row_bytes) / options.link_bytes_per_second;
    migrate_per_row /= static_cast<double>(options.refresh_steps);
  }
  // A set of `rows` rows, `bytes` bytes, whose rows appear in `hot_presence` of the slices'
  // worker batches (summed over its rows), with `migrate` seconds per step of migration.
  auto estimate = [&](int64_t rows, int64_t set_bytes, double hot_presence, double migrate) {
    HotPlanCandidate c;
    c.rows = rows;
    c.bytes = set_bytes;
    c.hot_rows_per_step = hot_presence / slices;
    c.cold_rows_per_step = (total_presence - hot_presence) / slices;
    c.ps_bytes_per_step = c.cold_rows_per_step * ps_per_row;
    c.sync_bytes_per_step = rows == 0 ? 0 : (world - 1) * (c.hot_rows_per_step * sync_per_row + 4);
    c.migrate_seconds_per_step = migrate;
    c.seconds_per_step =
        (c.ps_bytes_per_step + c.sync_bytes_per_step) / options.link_bytes_per_second +
        world * c.hot_rows_per_step * options.apply_seconds_per_row + c.migrate_seconds_per_step;
    return c;
  };
  for (size_t k : sizes) {
    const int64_t rows = static_cast<int64_t>(k);
    plan.candidates.push_back(
        estimate(rows, bytes[k], presence[k],
                 migrate_per_row * static_cast<double>(std::llabs(rows - options.current_rows))));
  }
  double best = std::numeric_limits<double>::infinity();
  for (const HotPlanCandidate& c : plan.candidates) best = std::min(best, c.seconds_per_step);
  bool kept = false;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    if (plan.candidates[i].rows == options.current_rows &&
        plan.candidates[i].seconds_per_step <= best * (1 + options.tolerance)) {
      plan.chosen = i;
      kept = true;
    }
  }
  for (size_t i = 0; i < plan.candidates.size() && !kept; ++i) {
    if (plan.candidates[i].seconds_per_step <= best * (1 + options.tolerance)) {
      plan.chosen = i;
      break;
    }
  }
  const int64_t chosen_rows = plan.candidates[plan.chosen].rows;
  for (int64_t i = 0; i < chosen_rows; ++i) plan.hot_ids[ranked[i].table].push_back(ranked[i].id);
  for (auto& ids : plan.hot_ids) std::sort(ids.begin(), ids.end());
  if (current != nullptr && current->total_rows() > 0) {
    // The set in use as it is and the chosen rows, judged on the same slices: what a refresh
    // gains.
    const auto [in_use, in_use_odd] = sample.PresenceOf(*current);
    plan.current = estimate(current->total_rows(), current->bytes(),
                            static_cast<double>(held_out ? in_use_odd : in_use), 0);
    const auto [chosen, chosen_odd] = sample.PresenceOf(plan.hot_ids);
    plan.proposed = estimate(chosen_rows, plan.candidates[plan.chosen].bytes,
                             static_cast<double>(held_out ? chosen_odd : chosen), 0);
  }
  return plan;
}

std::string HotPlan::Describe() const {
  std::string out = absl::StrCat("hot-set plan: chose ", Line(candidates[chosen]));
  absl::StrAppend(&out, "; no hot rows: ", Line(candidates.front()));
  if (candidates.size() > 1) absl::StrAppend(&out, "; largest: ", Line(candidates.back()));
  if (current.has_value()) absl::StrAppend(&out, "; the set in use: ", Line(*current));
  if (proposed.has_value()) absl::StrAppend(&out, "; the chosen rows: ", Line(*proposed));
  return out;
}

double MeasureApplySecondsPerRow(const embedding::SparseOptimizerOptions& optimizer, int dim) {
  constexpr int kRows = 4096;
  const int row_floats = dim + embedding::SparseOptimizerStateFloats(optimizer.type, dim);
  std::vector<float> rows(static_cast<size_t>(kRows) * row_floats, 0.01f);
  std::vector<float> grad(dim, 0.001f);
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kRows; ++r) {
      embedding::ApplySparseOptimizerToRow(optimizer, dim, grad.data(),
                                           rows.data() + static_cast<size_t>(r) * row_floats);
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / kRows);
  }
  return best;
}

}  // namespace dlrm::worker
