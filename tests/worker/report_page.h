// Reading the HTML page of worker/run_report.h in tests: how often a text occurs, and one chart.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace dlrm::testing {

inline int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The part of the page inside one chart's <figure> ("" when there is none).
inline std::string Figure(const std::string& html, const std::string& id) {
  const size_t begin = html.find(absl::StrCat("<figure class=\"chart\" id=\"", id, "\">"));
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</figure>", begin) - begin);
}

}  // namespace dlrm::testing
