// Evaluation metrics over host arrays of predicted probabilities and {0, 1} labels.
//
// scores.size() must equal labels.size() (checked: a caller bug, not user input). A label counts
// as positive when >= 0.5.
#pragma once

#include "absl/types/span.h"

namespace dlrm::dense {

// Exact ROC AUC: the probability that a random positive scores above a random negative, ties
// counting one half (Mann-Whitney U with average ranks). O(n log n); a few million samples take a
// fraction of a second. Returns NaN when the input is empty or holds only one class (undefined).
double Auc(absl::Span<const float> scores, absl::Span<const float> labels);

// Mean binary cross-entropy of probabilities, clipped to [1e-7, 1 - 1e-7]. NaN when empty.
double LogLoss(absl::Span<const float> scores, absl::Span<const float> labels);

// Fraction of samples with (score >= 0.5) == (label >= 0.5). NaN when empty.
double Accuracy(absl::Span<const float> scores, absl::Span<const float> labels);

}  // namespace dlrm::dense
