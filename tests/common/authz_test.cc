// The coordinator's token file (common/authz.h): its refusals name the line, never a token.
#include "common/authz.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace dlrm::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// With its two words swapped, a line's first word is the token: the refusal quoted it as the
// identity ("identity 'VeryS3cretToken-0123456789' is not admin or viewer").
TEST(TokenFile, ALineWithItsWordsSwappedIsRefusedWithoutQuotingThem) {
  dlrm::testing::ScopedTempDir dir("authz");
  const std::string path = dir.Sub("tokens");
  std::ofstream(path) << "admin admin-0123456789abcdef\nVeryS3cretToken-0123456789 viewer\n";
  auto tokens = LoadTokenFile(path);
  ASSERT_FALSE(tokens.ok());
  EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(tokens.status().message());
  EXPECT_THAT(message, HasSubstr(path + " line 2: the first word is not admin or viewer"));
  EXPECT_THAT(message, Not(HasSubstr("VeryS3cret")));
  EXPECT_THAT(message, Not(HasSubstr("admin-0123")));
}

}  // namespace
}  // namespace dlrm::common
