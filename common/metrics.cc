#include "common/metrics.h"

#include <exception>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "prometheus/text_serializer.h"

namespace dlrm::common {

std::string DlrmMetricName(const std::string& name) {
  return absl::StartsWith(name, "dlrm_") ? name : absl::StrCat("dlrm_", name);
}

MetricsRegistry::MetricsRegistry(std::shared_ptr<prometheus::Registry> registry,
                                 std::unique_ptr<prometheus::Exposer> exposer, int port)
    : registry_(std::move(registry)), exposer_(std::move(exposer)), port_(port) {}

MetricsRegistry::~MetricsRegistry() = default;

absl::StatusOr<std::unique_ptr<MetricsRegistry>> MetricsRegistry::Create(
    const MetricsOptions& options) {
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  int port = 0;
  if (options.port >= 0) {
    const std::string address = absl::StrCat(options.bind_address, ":", options.port);
    try {
      exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("metrics endpoint cannot listen on ", address, ": ", e.what()));
    }
    exposer->RegisterCollectable(registry);
    const std::vector<int> ports = exposer->GetListeningPorts();
    port = ports.empty() ? 0 : ports.front();
  }
  return std::unique_ptr<MetricsRegistry>(
      new MetricsRegistry(std::move(registry), std::move(exposer), port));
}

namespace {

// Registers (or finds) the family `name` and returns its metric with `labels` (extra: the
// histogram's buckets). A name or label prometheus-cpp refuses is a programming error.
template <typename Metric, typename... Extra>
Metric& AddMetric(prometheus::detail::Builder<Metric> builder, prometheus::Registry& registry,
                  const std::string& name, const std::string& help, const MetricLabels& labels,
                  const Extra&... extra) {
  try {
    return builder.Name(DlrmMetricName(name)).Help(help).Register(registry).Add(labels, extra...);
  } catch (const std::exception& e) {
    DLRM_CHECK(false) << "metric " << name << ": " << e.what();
    throw;
  }
}

}  // namespace

prometheus::Counter& MetricsRegistry::Counter(const std::string& name, const std::string& help,
                                              const MetricLabels& labels) {
  return AddMetric(prometheus::BuildCounter(), *registry_, name, help, labels);
}

prometheus::Gauge& MetricsRegistry::Gauge(const std::string& name, const std::string& help,
                                          const MetricLabels& labels) {
  return AddMetric(prometheus::BuildGauge(), *registry_, name, help, labels);
}

prometheus::Histogram& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                                  const std::vector<double>& buckets,
                                                  const MetricLabels& labels) {
  return AddMetric(prometheus::BuildHistogram(), *registry_, name, help, labels, buckets);
}

std::vector<double> MetricsRegistry::LatencyBuckets() {
  std::vector<double> buckets;
  for (double b = 50e-6; b < 15.0; b *= 2) buckets.push_back(b);
  return buckets;
}

std::string MetricsRegistry::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace dlrm::common
