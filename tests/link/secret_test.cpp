#include "link/secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "test_util.h"

namespace tandem::link {
namespace {

using tandem::testing::ScratchDir;
using tandem::testing::write_file;

std::string load_error(const std::string& path) {
  auto s = load_secret(path);
  return s.is_ok() ? "" : s.status().message();
}

TEST(Secret, NewWritesSixtyFourHexDigitsWithMode0600) {
  ScratchDir dir;
  const std::string path = dir.file("cluster.key");
  ASSERT_TRUE(write_new_secret(path).is_ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 65);
  EXPECT_TRUE(load_secret(path).is_ok());
}

TEST(Secret, NewRefusesToOverwrite) {
  ScratchDir dir;
  const std::string path = dir.file("cluster.key");
  ASSERT_TRUE(write_new_secret(path).is_ok());
  auto s = write_new_secret(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.message();
}

TEST(Secret, BadFilesAreRefusedWithTheReason) {
  ScratchDir dir;
  EXPECT_NE(load_error(dir.file("missing.key")).find("no such file"), std::string::npos);
  const struct {
    const char* name;
    std::string content;
    mode_t mode;
    const char* expect;
  } cases[] = {
      {"empty.key", "", 0600, "empty"},
      {"short.key", std::string(62, 'a'), 0600, "too short: 31 bytes"},
      {"odd.key", std::string(65, 'a'), 0600, "odd number"},
      {"nothex.key", std::string(64, 'z'), 0600, "not hex"},
      {"open.key", std::string(64, 'a'), 0644, "readable or writable by other users (mode 0644)"},
  };
  for (const auto& c : cases) {
    const std::string path = dir.file(c.name);
    write_file(path, c.content);
    ::chmod(path.c_str(), c.mode);
    const std::string err = load_error(path);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(path), std::string::npos) << err;
  }
}

TEST(Secret, HmacDependsOnTheKey) {
  const Secret a(std::vector<uint8_t>(32, 1)), b(std::vector<uint8_t>(32, 2));
  const std::vector<uint8_t> msg = {1, 2, 3};
  EXPECT_EQ(a.hmac(msg).size(), 32u);
  EXPECT_TRUE(constant_time_equal(a.hmac(msg), a.hmac(msg)));
  EXPECT_FALSE(constant_time_equal(a.hmac(msg), b.hmac(msg)));
}

}  // namespace
}  // namespace tandem::link
