// Checkpoint files without MPI (train/checkpoint.h): what is written is read back, and a
// missing, truncated or damaged file is refused with one line naming it.
#include "commscope/train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace {

using namespace commscope::train;

struct Files : ::testing::Test {
  // One folder per test and process: ctest runs this file's tests in parallel processes.
  std::string dir = ::testing::TempDir() + "train_checkpoint_test_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                    std::to_string(::getpid());
  std::vector<float> a = {1.5f, -2.0f, 3.25f}, b = {0.5f, 0.25f};
  void SetUp() override {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string path() const { return checkpoint_file(dir, 6, 1); }
  std::string read_back(std::vector<float>& x, std::vector<float>& y) {
    auto s = read_checkpoint(path(), {&x, &y});
    return s.ok() ? "" : s.error().message;
  }
};

TEST_F(Files, RoundTrip) {
  EXPECT_EQ(path(), dir + "/step6.rank1.bin");
  ASSERT_TRUE(write_checkpoint(path(), {&a, &b}).ok());
  std::vector<float> x(3), y(2);
  EXPECT_EQ(read_back(x, y), "");
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
}

TEST_F(Files, EveryFlippedByteIsRefused) {
  ASSERT_TRUE(write_checkpoint(path(), {&a, &b}).ok());
  const auto size = std::filesystem::file_size(path());
  std::string bytes(size, '\0');
  std::ifstream(path(), std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(size));
  for (std::size_t i = 0; i < size; ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    std::ofstream(path(), std::ios::binary | std::ios::trunc).write(bad.data(), bad.size());
    std::vector<float> x(3), y(2);
    const std::string err = read_back(x, y);
    EXPECT_NE(err, "") << "byte " << i;
    EXPECT_NE(err.find(path()), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
  // A flipped payload byte is the checksum's to catch.
  std::string bad = bytes;
  bad[10] = static_cast<char>(bad[10] ^ 0x01);
  std::ofstream(path(), std::ios::binary | std::ios::trunc).write(bad.data(), bad.size());
  std::vector<float> x(3), y(2);
  EXPECT_NE(read_back(x, y).find(": damaged"), std::string::npos);
}

TEST_F(Files, MissingTruncatedAndForeignAreSaidSo) {
  std::vector<float> x(3), y(2);
  EXPECT_NE(read_back(x, y).find("step6.rank1.bin: missing"), std::string::npos);
  ASSERT_TRUE(write_checkpoint(path(), {&a, &b}).ok());
  std::filesystem::resize_file(path(), std::filesystem::file_size(path()) - 3);
  EXPECT_NE(read_back(x, y).find("step6.rank1.bin: truncated"), std::string::npos);
  ASSERT_TRUE(write_checkpoint(path(), {&a, &b}).ok());
  std::vector<float> bigger(4), y2(2);
  auto s = read_checkpoint(path(), {&bigger, &y2});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("truncated"), std::string::npos) << s.error().message;
  std::vector<float> smaller(2);
  s = read_checkpoint(path(), {&smaller, &y2});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("from another model"), std::string::npos);
  EXPECT_NE(read_manifest(dir).error().message.find("latest.json: missing"), std::string::npos);
  ASSERT_TRUE(write_manifest(dir, {{"step", 6}}).ok());
  auto m = read_manifest(dir);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)["step"], 6);
}

}  // namespace
