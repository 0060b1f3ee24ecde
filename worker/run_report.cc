#include "worker/run_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "worker/input/output_file.h"

namespace dlrm::worker {

namespace {

// Consecutive points `a` then `b` as one: from a's start to b's end, the loss weighted by the
// finite-loss steps behind each (`wa`, `wb`).
TrainingPoint Merged(const TrainingPoint& a, double wa, const TrainingPoint& b, double wb) {
  TrainingPoint m = b;
  m.start_seconds = a.start_seconds;
  m.start_step = a.start_step;
  m.start_samples = a.start_samples;
  m.paused_seconds = a.paused_seconds + b.paused_seconds;
  double sum = 0;
  if (wa > 0) sum += a.loss * wa;
  if (wb > 0) sum += b.loss * wb;
  m.loss = wa + wb > 0 ? sum / (wa + wb) : std::nan("");
  return m;
}

}  // namespace

double TrainingPoint::samples_per_sec() const {
  const double dt = seconds - start_seconds - paused_seconds;
  return dt > 0 ? static_cast<double>(samples - start_samples) / dt : 0;
}

RunRecorder::RunRecorder(const RunRecorderOptions& options)
    : max_points_(std::max(options.max_points, 2)),
      min_interval_seconds_(options.min_interval_seconds) {}

void RunRecorder::Start(double seconds, int64_t step, int64_t samples) {
  started_ = true;
  open_ = {.start_seconds = seconds, .start_step = step, .start_samples = samples};
  open_loss_sum_ = 0;
  open_loss_weight_ = 0;
  last_step_ = step;
  last_samples_ = samples;
  last_seconds_ = seconds;
}

void RunRecorder::Record(double seconds, int64_t step, int64_t samples, double loss) {
  if (!started_) {
    // Without Start(), the first update is the baseline; its loss belongs to the first interval.
    Start(seconds, step, samples);
    if (std::isfinite(loss)) {
      open_loss_sum_ = loss;
      open_loss_weight_ = 1;
    }
    return;
  }
  if (step <= last_step_) return;
  const double weight = static_cast<double>(step - last_step_);
  if (std::isfinite(loss)) {
    open_loss_sum_ += loss * weight;
    open_loss_weight_ += weight;
  }
  last_step_ = step;
  last_samples_ = samples;
  last_seconds_ = seconds;
  if (last_step_ - open_.start_step >= interval_steps_ &&
      last_seconds_ - open_.start_seconds >= min_interval_seconds_) {
    CloseInterval();
  }
}

void RunRecorder::CloseInterval() {
  TrainingPoint p = open_;
  p.seconds = last_seconds_;
  p.step = last_step_;
  p.samples = last_samples_;
  p.loss = open_loss_weight_ > 0 ? open_loss_sum_ / open_loss_weight_ : std::nan("");
  points_.push_back(p);
  loss_weights_.push_back(open_loss_weight_);
  open_ = {
      .start_seconds = last_seconds_, .start_step = last_step_, .start_samples = last_samples_};
  open_loss_sum_ = 0;
  open_loss_weight_ = 0;
  if (static_cast<int>(points_.size()) > max_points_) Halve();
}

void RunRecorder::Halve() {
  std::vector<TrainingPoint> merged;
  std::vector<double> weights;
  for (size_t i = 0; i < points_.size(); i += 2) {
    if (i + 1 == points_.size()) {
      // An odd one out goes back into the open interval, so that every point keeps spanning
      // the same number of steps.
      const TrainingPoint& p = points_[i];
      open_.start_seconds = p.start_seconds;
      open_.start_step = p.start_step;
      open_.start_samples = p.start_samples;
      open_.paused_seconds += p.paused_seconds;
      if (loss_weights_[i] > 0) {
        open_loss_sum_ += p.loss * loss_weights_[i];
        open_loss_weight_ += loss_weights_[i];
      }
      break;
    }
    merged.push_back(Merged(points_[i], loss_weights_[i], points_[i + 1], loss_weights_[i + 1]));
    weights.push_back(loss_weights_[i] + loss_weights_[i + 1]);
  }
  points_ = std::move(merged);
  loss_weights_ = std::move(weights);
  interval_steps_ *= 2;
}

void RunRecorder::Pause(double seconds) {
  if (std::isfinite(seconds) && seconds > 0) open_.paused_seconds += seconds;
}

void RunRecorder::RecordEval(double seconds, int64_t step, double auc, double logloss) {
  const EvalPoint p{.seconds = seconds, .step = step, .auc = auc, .logloss = logloss};
  if (!eval_.empty() && eval_.back().step == step) {
    eval_.back() = p;
    return;
  }
  eval_.push_back(p);
  if (static_cast<int>(eval_.size()) > max_points_) {
    // Every other one goes; the newest stays.
    std::vector<EvalPoint> kept;
    for (size_t i = eval_.size() % 2 == 0 ? 1 : 0; i < eval_.size(); i += 2)
      kept.push_back(eval_[i]);
    eval_ = std::move(kept);
  }
}

std::vector<TrainingPoint> RunRecorder::training() const {
  std::vector<TrainingPoint> out = points_;
  if (started_ && (last_step_ > open_.start_step || (points_.empty() && open_loss_weight_ > 0))) {
    TrainingPoint p = open_;
    p.seconds = last_seconds_;
    p.step = last_step_;
    p.samples = last_samples_;
    p.loss = open_loss_weight_ > 0 ? open_loss_sum_ / open_loss_weight_ : std::nan("");
    if (!out.empty() && last_seconds_ - open_.start_seconds < min_interval_seconds_) {
      // Shorter than an interval may be: one more point would be the spike the minimum is there
      // to prevent (a worker's report that landed in it carries a second's samples). The last
      // point takes it in instead.
      out.back() = Merged(out.back(), loss_weights_.back(), p, open_loss_weight_);
    } else {
      out.push_back(p);
    }
  }
  return out;
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> RunSummary(const std::string& job,
                                                            const TrainReport& report,
                                                            const std::string& failure) {
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("job", job);
  rows.emplace_back("outcome", failure.empty() ? "succeeded" : absl::StrCat("failed: ", failure));
  if (report.eval_samples > 0) {
    rows.emplace_back("final AUC", absl::StrFormat("%.4f", report.auc));
    rows.emplace_back("final logloss", absl::StrFormat("%.4f", report.logloss));
    rows.emplace_back("final accuracy", absl::StrFormat("%.4f", report.accuracy));
    rows.emplace_back("eval samples", absl::StrCat(report.eval_samples));
  } else {
    rows.emplace_back("final AUC", "not evaluated");
  }
  rows.emplace_back("steps", absl::StrCat(report.steps));
  rows.emplace_back("samples", absl::StrCat(report.train_samples));
  rows.emplace_back("training seconds", absl::StrFormat("%.1f", report.train_seconds));
  rows.emplace_back("samples/s", absl::StrFormat("%.0f", report.samples_per_sec));
  rows.emplace_back("date",
                    absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::LocalTimeZone()));
  return rows;
}

namespace {

// A point of a line chart; the line breaks before it with gap_before (and at a point left out).
struct ChartPoint {
  double x = 0;
  double y = 0;
  bool gap_before = false;
};

// One line chart: the points in x order; non-finite ones are left out.
struct ChartSpec {
  std::string id;
  std::string title;
  std::string x_label;
  std::string y_label;
  std::string color;
  bool integer_x = false;  // x is a step count: no fractional ticks
  bool y_from_zero = false;
  bool y_unit_interval = false;  // the axis stays within [0, 1]
  bool markers = false;          // a dot (with a hover title) at every point
  std::string empty_note;
};

constexpr double kWidth = 560;
constexpr double kHeight = 300;
constexpr double kLeft = 64;
constexpr double kRight = 18;
constexpr double kTop = 14;
constexpr double kBottom = 46;
constexpr int kMaxTicks = 20;  // NiceAxis makes about 5; more means the range overflowed

struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;
};

// An axis over [lo, hi] with about five ticks at 1, 2 or 5 times a power of ten.
Axis NiceAxis(double lo, double hi, bool integer, bool from_zero, bool unit_interval) {
  if (from_zero) lo = std::min(lo, 0.0);
  if (hi - lo <= 0) {
    const double pad = std::max(std::abs(hi) * 0.05, integer ? 1.0 : 1e-3);
    lo -= pad;
    hi += pad;
    if (from_zero) lo = std::max(lo, 0.0);
  }
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  if (integer) step = std::max(step, 1.0);
  Axis axis{std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
  if (unit_interval) {
    axis.lo = std::max(axis.lo, 0.0);
    axis.hi = std::min(axis.hi, 1.0);
    if (axis.hi <= axis.lo) axis = {0, 1, 0.2};
  }
  return axis;
}

// "0.05", "120", "80k", "1.5M": as many decimals as the tick step needs.
std::string TickLabel(double v, const Axis& axis) {
  const double max_abs = std::max(std::abs(axis.lo), std::abs(axis.hi));
  double scale = 1;
  const char* suffix = "";
  if (max_abs >= 1e6) {
    scale = 1e6;
    suffix = "M";
  } else if (max_abs >= 1e4) {
    scale = 1e3;
    suffix = "k";
  }
  if (std::abs(v) < axis.step * 1e-6) v = 0;
  const double s = axis.step / scale;
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(s) - 1e-9)));
  return absl::StrFormat("%.*f%s", decimals, v / scale, suffix);
}

std::string Num(double v) { return absl::StrFormat("%.1f", v); }

std::string RenderChart(const ChartSpec& spec, const std::vector<ChartPoint>& in) {
  std::vector<ChartPoint> pts;
  bool gap = false;
  for (ChartPoint p : in) {
    gap = gap || p.gap_before;
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) {
      gap = true;  // the line does not bridge a value it cannot draw
      continue;
    }
    p.gap_before = gap;
    pts.push_back(p);
    gap = false;
  }
  std::string out = absl::StrCat("<figure class=\"chart\" id=\"", spec.id, "\">\n<figcaption>",
                                 HtmlEscape(spec.title), "</figcaption>\n");
  if (pts.empty()) {
    absl::StrAppend(&out, "<p class=\"nodata\">No data", spec.empty_note.empty() ? "" : ": ",
                    HtmlEscape(spec.empty_note), "</p>\n</figure>\n");
    return out;
  }
  double x_lo = pts.front().x, x_hi = x_lo, y_lo = pts.front().y, y_hi = y_lo;
  for (const auto& [x, y, gap_before] : pts) {
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
    y_lo = std::min(y_lo, y);
    y_hi = std::max(y_hi, y);
  }
  const Axis xa = NiceAxis(x_lo, x_hi, spec.integer_x, /*from_zero=*/false, false);
  const Axis ya = NiceAxis(y_lo, y_hi, false, spec.y_from_zero, spec.y_unit_interval);
  for (const Axis& a : {xa, ya}) {
    if (!std::isfinite(a.lo) || !std::isfinite(a.hi) || !std::isfinite(a.step) || a.step <= 0 ||
        (a.hi - a.lo) / a.step > kMaxTicks) {
      absl::StrAppend(&out, "<p class=\"nodata\">No data: the values are out of range</p>\n",
                      "</figure>\n");
      return out;
    }
  }
  const double plot_w = kWidth - kLeft - kRight;
  const double plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - xa.lo) / (xa.hi - xa.lo) * plot_w; };
  auto py = [&](double y) { return kTop + (ya.hi - y) / (ya.hi - ya.lo) * plot_h; };

  absl::StrAppend(&out, "<svg viewBox=\"0 0 ", kWidth, " ", kHeight,
                  "\" role=\"img\" aria-label=\"", HtmlEscape(spec.title), "\">\n");
  // Grid and tick labels.
  for (int i = 0;; ++i) {
    const double v = ya.lo + i * ya.step;
    if (v > ya.hi + ya.step * 1e-6) break;
    const std::string y = Num(py(v));
    absl::StrAppend(&out, "<line class=\"grid\" x1=\"", Num(kLeft), "\" y1=\"", y, "\" x2=\"",
                    Num(kLeft + plot_w), "\" y2=\"", y, "\"/><text class=\"tick\" x=\"",
                    Num(kLeft - 6), "\" y=\"", y, "\" text-anchor=\"end\" dy=\"0.32em\">",
                    TickLabel(v, ya), "</text>\n");
  }
  for (int i = 0;; ++i) {
    const double v = xa.lo + i * xa.step;
    if (v > xa.hi + xa.step * 1e-6) break;
    const std::string x = Num(px(v));
    absl::StrAppend(&out, "<line class=\"grid\" x1=\"", x, "\" y1=\"", Num(kTop), "\" x2=\"", x,
                    "\" y2=\"", Num(kTop + plot_h), "\"/><text class=\"tick\" x=\"", x, "\" y=\"",
                    Num(kTop + plot_h + 16), "\" text-anchor=\"middle\">", TickLabel(v, xa),
                    "</text>\n");
  }
  absl::StrAppend(&out, "<rect class=\"frame\" x=\"", Num(kLeft), "\" y=\"", Num(kTop),
                  "\" width=\"", Num(plot_w), "\" height=\"", Num(plot_h), "\"/>\n");
  absl::StrAppend(&out, "<text class=\"label\" x=\"", Num(kLeft + plot_w / 2), "\" y=\"",
                  Num(kHeight - 8), "\" text-anchor=\"middle\">", HtmlEscape(spec.x_label),
                  "</text>\n");
  absl::StrAppend(&out, "<text class=\"label\" transform=\"translate(14 ", Num(kTop + plot_h / 2),
                  ") rotate(-90)\" text-anchor=\"middle\">", HtmlEscape(spec.y_label), "</text>\n");
  // The curve.
  std::string path;
  for (size_t i = 0; i < pts.size(); ++i) {
    absl::StrAppend(&path, i == 0 || pts[i].gap_before ? "M" : "L", Num(px(pts[i].x)), ",",
                    Num(py(pts[i].y)));
  }
  absl::StrAppend(&out, "<path class=\"series\" stroke=\"", spec.color, "\" d=\"", path, "\"/>\n");
  if (spec.markers || pts.size() == 1) {
    for (const auto& [x, y, gap_before] : pts) {
      absl::StrAppend(
          &out, "<circle cx=\"", Num(px(x)), "\" cy=\"", Num(py(y)), "\" r=\"3.5\" fill=\"",
          spec.color, "\"><title>",
          HtmlEscape(absl::StrFormat("%s %g: %s %.4g", spec.x_label, x, spec.y_label, y)),
          "</title></circle>\n");
    }
  }
  absl::StrAppend(&out, "</svg>\n</figure>\n");
  return out;
}

constexpr char kStyle[] =
    R"(body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;
  margin:24px auto;max-width:1160px;padding:0 16px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 14px}
dl.summary{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:0 24px;
  margin:0 0 20px;font-size:14px}
dl.summary div{display:flex;gap:12px;padding:5px 0;border-bottom:1px solid #eaeef2}
dl.summary dt{flex:0 0 132px;font-weight:600;color:#57606a}
dl.summary dd{margin:0;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:18px}
figure.chart{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:10px 12px 6px}
figcaption{font-weight:600;font-size:15px;margin-bottom:4px}
svg{width:100%;height:auto;display:block}
.grid{stroke:#eaeef2;stroke-width:1}
.frame{fill:none;stroke:#8c959f;stroke-width:1}
.tick{font-size:11px;fill:#57606a}
.label{font-size:12px;fill:#1f2328}
.series{fill:none;stroke-width:2;stroke-linejoin:round}
.nodata{color:#57606a;font-style:italic;padding:40px 0;text-align:center}
footer{margin-top:18px;font-size:12px;color:#57606a}
)";

}  // namespace

std::string RenderHtmlReport(const HtmlReportOptions& options, const RunRecorder& recorder) {
  const std::vector<TrainingPoint> training = recorder.training();
  std::vector<ChartPoint> loss, throughput, auc, logloss;
  // Minutes on the throughput axis once a run is long enough for seconds to be hard to read.
  const bool minutes = !training.empty() && training.back().seconds >= 600;
  for (const TrainingPoint& p : training) {
    loss.push_back({static_cast<double>(p.step), p.loss});
    if (p.seconds - p.start_seconds - p.paused_seconds > 0) {
      // An interval with an evaluation in it: no line across the pause.
      throughput.push_back({minutes ? p.seconds / 60 : p.seconds, p.samples_per_sec(),
                            /*gap_before=*/p.paused_seconds > 0});
    }
  }
  for (const EvalPoint& e : recorder.eval()) {
    auc.push_back({static_cast<double>(e.step), e.auc});
    logloss.push_back({static_cast<double>(e.step), e.logloss});
  }
  const std::string no_eval =
      "the run was not evaluated (no eval data, or it stopped before its evaluation)";
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
      HtmlEscape(options.title), "</title>\n<style>\n", kStyle, "</style>\n</head>\n<body>\n<h1>",
      HtmlEscape(options.title), "</h1>\n<dl class=\"summary\">\n");
  for (const auto& [key, value] : options.summary) {
    absl::StrAppend(&out, "<div><dt>", HtmlEscape(key), "</dt><dd>", HtmlEscape(value),
                    "</dd></div>\n");
  }
  absl::StrAppend(&out, "</dl>\n<div class=\"charts\">\n");
  absl::StrAppend(&out, RenderChart({.id = "chart-loss",
                                     .title = "Training loss",
                                     .x_label = "step",
                                     .y_label = "loss",
                                     .color = "#0969da",
                                     .integer_x = true,
                                     .empty_note = "no training step was recorded"},
                                    loss));
  absl::StrAppend(&out, RenderChart({.id = "chart-throughput",
                                     .title = "Throughput",
                                     .x_label = minutes ? "elapsed (min)" : "elapsed (s)",
                                     .y_label = "samples/s",
                                     .color = "#1a7f37",
                                     .y_from_zero = true,
                                     .empty_note = "no training interval was recorded"},
                                    throughput));
  absl::StrAppend(&out, RenderChart({.id = "chart-auc",
                                     .title = "Eval AUC",
                                     .x_label = "step",
                                     .y_label = "AUC",
                                     .color = "#8250df",
                                     .integer_x = true,
                                     .y_unit_interval = true,
                                     .markers = true,
                                     .empty_note = no_eval},
                                    auc));
  absl::StrAppend(&out, RenderChart({.id = "chart-logloss",
                                     .title = "Eval logloss",
                                     .x_label = "step",
                                     .y_label = "logloss",
                                     .color = "#bc4c00",
                                     .integer_x = true,
                                     .markers = true,
                                     .empty_note = no_eval},
                                    logloss));
  absl::StrAppend(&out,
                  "</div>\n<footer>Training loss: mean over each interval of steps. Throughput: "
                  "samples per second over each interval. Eval: periodic evaluations "
                  "(training.eval_every_steps) and the final one.</footer>\n</body>\n</html>\n");
  return out;
}

absl::Status WriteHtmlReport(const std::string& path, const HtmlReportOptions& options,
                             const RunRecorder& recorder) {
  const std::string html = RenderHtmlReport(options, recorder);
  DLRM_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Open(path, "--report"));
  DLRM_RETURN_IF_ERROR(out->Write(html));
  return out->Commit();
}

}  // namespace dlrm::worker
