#include "gateway/keys.h"

#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tandem::gateway {
namespace {

TEST(KeyStore, CreatedKeyAuthenticatesAndIsStoredHashed) {
  tandem::testing::ScratchDir dir;
  const std::string path = dir.file("keys.db");
  auto store = KeyStore::open(path);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  auto k = store.value()->create("alice", {60, 2});
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  EXPECT_EQ(k->secret.size(), 61u);
  EXPECT_EQ(k->secret.rfind("tdm_" + k->record.id + "_", 0), 0u);
  auto who = store.value()->authenticate(k->secret);
  ASSERT_TRUE(who.is_ok()) << who.status().to_string();
  EXPECT_EQ(who->name, "alice");
  EXPECT_EQ(who->limits.rpm, 60);
  EXPECT_EQ(who->limits.concurrency, 2);

  // The secret part of the key appears nowhere in the file, and the file is private.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.find(k->secret.substr(13)), std::string::npos);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
}

TEST(KeyStore, WrongMalformedAndRevokedKeysAreRefused) {
  auto store = KeyStore::open(":memory:").value();
  auto k = store->create("bob", {}).value();
  std::string wrong = k.secret;
  wrong.back() = wrong.back() == 'a' ? 'b' : 'a';
  EXPECT_EQ(store->authenticate(wrong).status().code(), StatusCode::not_found);
  EXPECT_EQ(store->authenticate("sk-12345").status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(store->authenticate("").status().code(), StatusCode::invalid_argument);
  ASSERT_TRUE(store->revoke("bob").is_ok());
  EXPECT_EQ(store->authenticate(k.secret).status().code(), StatusCode::not_found);
  EXPECT_EQ(store->revoke("bob").code(), StatusCode::not_found);
}

TEST(KeyStore, NamesAreUniqueAmongActiveKeysAndValidated) {
  auto store = KeyStore::open(":memory:").value();
  ASSERT_TRUE(store->create("carol", {}).is_ok());
  auto dup = store->create("carol", {});
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.status().message().find("exists already"), std::string::npos);
  ASSERT_TRUE(store->revoke("carol").is_ok());
  EXPECT_TRUE(store->create("carol", {}).is_ok());  // the name is free again
  EXPECT_FALSE(store->create("has space", {}).is_ok());
  EXPECT_FALSE(store->create("", {}).is_ok());
  EXPECT_FALSE(store->create("neg", {-1, 0}).is_ok());
}

TEST(KeyStore, UsageAccumulatesAndListShowsIt) {
  auto store = KeyStore::open(":memory:").value();
  auto k = store->create("dave", {}).value();
  ASSERT_TRUE(store->record_usage(k.record.id, 10, 5).is_ok());
  ASSERT_TRUE(store->record_usage(k.record.id, 3, 2).is_ok());
  auto all = store->list().value();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].requests, 2u);
  EXPECT_EQ(all[0].prompt_tokens, 13u);
  EXPECT_EQ(all[0].completion_tokens, 7u);
}

TEST(KeyStore, ACorruptDatabaseIsAnError) {
  tandem::testing::ScratchDir dir;
  tandem::testing::write_file(dir.file("junk.db"), std::string(8192, 'x'));
  auto store = KeyStore::open(dir.file("junk.db"));
  ASSERT_FALSE(store.is_ok());
  EXPECT_NE(store.status().message().find("junk.db"), std::string::npos) << store.status().message();
}

}  // namespace
}  // namespace tandem::gateway
