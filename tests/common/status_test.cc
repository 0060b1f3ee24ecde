#include "common/status.h"

#include "gtest/gtest.h"

namespace dlrm {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("odd value ", x));
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  DLRM_ASSIGN_OR_RETURN(int h, Half(x));
  DLRM_ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

TEST(StatusMacros, PropagatesErrorWithItsMessage) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  absl::Status st = Quarter(6, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "odd value 3");
}

TEST(StatusMacros, AnnotateKeepsCode) {
  absl::Status st = Annotate(absl::NotFoundError("no table 7"), "lookup");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "lookup: no table 7");
}

}  // namespace
}  // namespace dlrm
