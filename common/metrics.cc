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

prometheus::Counter& MetricsRegistry::Counter(const std::string& name, const std::string& help,
                                              const MetricLabels& labels) {
  try {
    return prometheus::BuildCounter()
        .Name(DlrmMetricName(name))
        .Help(help)
        .Register(*registry_)
        .Add(labels);
  } catch (const std::exception& e) {
    DLRM_CHECK(false) << "metric " << name << ": " << e.what();
    throw;
  }
}

prometheus::Gauge& MetricsRegistry::Gauge(const std::string& name, const std::string& help,
                                          const MetricLabels& labels) {
  try {
    return prometheus::BuildGauge()
        .Name(DlrmMetricName(name))
        .Help(help)
        .Register(*registry_)
        .Add(labels);
  } catch (const std::exception& e) {
    DLRM_CHECK(false) << "metric " << name << ": " << e.what();
    throw;
  }
}

prometheus::Histogram& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                                  const std::vector<double>& buckets,
                                                  const MetricLabels& labels) {
  try {
    return prometheus::BuildHistogram()
        .Name(DlrmMetricName(name))
        .Help(help)
        .Register(*registry_)
        .Add(labels, buckets);
  } catch (const std::exception& e) {
    DLRM_CHECK(false) << "metric " << name << ": " << e.what();
    throw;
  }
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
