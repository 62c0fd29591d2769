#include "common/safetensors.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace psync {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(SafetensorsTest, RoundTrip) {
  std::vector<TensorSpec> tensors = {{"a.weight", {2, 3}}, {"a.bias", {2}}};
  std::vector<float> flat = {1, 2, 3, 4, 5, 6, -7.5f, 8.25f};
  const std::string path = TempPath("rt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, flat).ok());
  auto loaded = ReadSafetensors(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ(loaded->at("a.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(loaded->at("a.weight").values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(loaded->at("a.bias").values, (std::vector<float>{-7.5f, 8.25f}));
  // The header is padded so that data starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
}

TEST(SafetensorsTest, WrongSizeIsRefused) {
  std::vector<float> flat = {1, 2, 3};
  EXPECT_EQ(WriteSafetensors(TempPath("x"), {{"a", {2}}}, flat).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, CorruptFilesGiveErrors) {
  EXPECT_EQ(ReadSafetensors(TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
  auto write = [](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  };
  const std::string p = TempPath("bad.safetensors");
  write(p, "abc");
  EXPECT_EQ(ReadSafetensors(p).status().code(), absl::StatusCode::kInvalidArgument);
  write(p, std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}");
  EXPECT_EQ(ReadSafetensors(p).status().code(), absl::StatusCode::kInvalidArgument);
  std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(header.size());
  write(p, len + header + std::string(8, '\0'));  // 8 data bytes, header claims 16
  auto s = ReadSafetensors(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s;
  header = R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})";
  len[0] = static_cast<char>(header.size());
  write(p, len + header + std::string(8, '\0'));
  EXPECT_NE(ReadSafetensors(p).status().message().find("F16"), std::string::npos);
}

}  // namespace
}  // namespace psync
