#include "common/status.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

Status fails_with(Status s) {
  TANDEM_RETURN_IF_ERROR(s);
  return Status::internal("not reached when s is an error");
}

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = Status::not_found("model.gguf: no such file");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_EQ(s.to_string(), "not found: model.gguf: no such file");
}

TEST(Status, WithContextPrefixesMessageKeepsCode) {
  Status s = Status::unavailable("connection refused").with_context("worker box-b (10.0.0.2:7070)");
  EXPECT_EQ(s.code(), StatusCode::unavailable);
  EXPECT_EQ(s.message(), "worker box-b (10.0.0.2:7070): connection refused");
  EXPECT_TRUE(Status::ok().with_context("ignored").is_ok());
}

TEST(Status, ReturnIfErrorReturnsTheError) {
  EXPECT_EQ(fails_with(Status::cancelled("stop")).code(), StatusCode::cancelled);
  EXPECT_EQ(fails_with(Status::ok()).code(), StatusCode::internal);
}

TEST(Result, HoldsValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(good.value(), 7);
  Result<int> bad = Status::invalid_argument("no");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "no");
}

}  // namespace
}  // namespace tandem
