#include "common/model/layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

std::vector<TensorSpec> Mlp() {
  return {{"fc1.weight", {256, 784}}, {"fc1.bias", {256}},
          {"fc2.weight", {128, 256}}, {"fc2.bias", {128}},
          {"fc3.weight", {10, 128}},  {"fc3.bias", {10}}};
}

TEST(LayoutTest, ChunksTileTheFlatVectorInOrder) {
  auto layout = Layout::Create(Mlp(), 64 << 10, 3, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  int64_t next = 0;
  for (const ChunkInfo& c : layout->chunks()) {
    EXPECT_EQ(c.flat_offset, next);
    EXPECT_LE(c.bytes(), 64 << 10);
    EXPECT_EQ(c.flat_offset, layout->tensor_offset(c.tensor) + c.tensor_offset);
    next += c.num_elements;
  }
  EXPECT_EQ(next, layout->total_elements());
  EXPECT_EQ(layout->total_elements(), 256 * 784 + 256 + 128 * 256 + 128 + 1280 + 10);
}

TEST(LayoutTest, BalancesBytesWithinOneChunk) {
  for (int servers : {1, 2, 3, 5, 8}) {
    auto layout = Layout::Create(Mlp(), 32 << 10, servers, 1);
    ASSERT_TRUE(layout.ok());
    int64_t lo = INT64_MAX, hi = 0, sum = 0;
    for (int s = 0; s < servers; ++s) {
      lo = std::min(lo, layout->ServerBytes(s));
      hi = std::max(hi, layout->ServerBytes(s));
      sum += layout->ServerBytes(s);
    }
    EXPECT_EQ(sum, layout->total_elements() * 4);
    EXPECT_LE(hi - lo, 32 << 10) << servers << " servers";
  }
}

TEST(LayoutTest, LargeTensorsSpreadOverAllServers) {
  auto layout = Layout::Create(Mlp(), 16 << 10, 4, 1);
  ASSERT_TRUE(layout.ok());
  std::vector<bool> seen(4, false);
  for (const ChunkInfo& c : layout->chunks()) {
    if (c.tensor == 0) seen[c.server] = true;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 4);
}

TEST(LayoutTest, ChunksOnServerListsEachChunkOnce) {
  auto layout = Layout::Create(Mlp(), 8 << 10, 3, 1);
  ASSERT_TRUE(layout.ok());
  size_t total = 0;
  for (int s = 0; s < 3; ++s) {
    const auto& ids = layout->ChunksOnServer(s);
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    for (int32_t id : ids) EXPECT_EQ(layout->chunks()[id].server, s);
    total += ids.size();
  }
  EXPECT_EQ(total, layout->chunks().size());
}

TEST(LayoutTest, FingerprintIsStableAndSensitive) {
  auto a = Layout::Create(Mlp(), 64 << 10, 2, 7);
  auto b = Layout::Create(Mlp(), 64 << 10, 2, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_NE(a->fingerprint(), Layout::Create(Mlp(), 32 << 10, 2, 7)->fingerprint());
  EXPECT_NE(a->fingerprint(), Layout::Create(Mlp(), 64 << 10, 3, 7)->fingerprint());
  EXPECT_NE(a->fingerprint(), Layout::Create(Mlp(), 64 << 10, 2, 8)->fingerprint());
  auto renamed = Mlp();
  renamed[1].name = "fc1.b";
  EXPECT_NE(a->fingerprint(), Layout::Create(renamed, 64 << 10, 2, 7)->fingerprint());
  auto reshaped = Mlp();
  reshaped[0].shape = {784, 256};
  EXPECT_NE(a->fingerprint(), Layout::Create(reshaped, 64 << 10, 2, 7)->fingerprint());
}

// The fingerprint travels in registrations and checkpoints: its value for
// a given layout must not change between releases.
TEST(LayoutTest, FingerprintKeepsItsValue) {
  EXPECT_EQ(Layout::Create(Mlp(), 64 << 10, 2, 7)->fingerprint(), 1735778723455032288ULL);
  EXPECT_EQ(Layout::Create(Mlp(), 8 << 10, 5, 1)->fingerprint(), 13921539736294324617ULL);
}

TEST(LayoutTest, DifferenceNamesWhatDiffersFirst) {
  const Layout a = *Layout::Create(Mlp(), 64 << 10, 2, 7);
  EXPECT_EQ(LayoutDifference(a, "a", *Layout::Create(Mlp(), 64 << 10, 2, 7), "b"), "");
  EXPECT_EQ(LayoutDifference(a, "a", *Layout::Create(Mlp(), 32 << 10, 2, 7), "b"),
            "the chunk size (--chunk_kb): 65536 bytes in a, 32768 in b");
  EXPECT_EQ(LayoutDifference(a, "a", *Layout::Create(Mlp(), 64 << 10, 3, 7), "b"),
            "the server count: 2 in a, 3 in b");
  EXPECT_EQ(LayoutDifference(a, "a", *Layout::Create(Mlp(), 64 << 10, 2, 8), "b"),
            "the seed: 7 in a, 8 in b");
  auto reshaped = Mlp();
  reshaped[2].shape[0] += 1;
  EXPECT_EQ(LayoutDifference(a, "a", *Layout::Create(reshaped, 64 << 10, 2, 7), "b"),
            absl::StrCat("tensor 2: ", Mlp()[2].name, " [", absl::StrJoin(Mlp()[2].shape, ", "),
                         "] in a, ", Mlp()[2].name, " [",
                         absl::StrJoin(reshaped[2].shape, ", "), "] in b"));
  auto fewer = Mlp();
  fewer.pop_back();
  const TensorSpec last = Mlp().back();
  const std::string extra = absl::StrCat(" (tensor ", fewer.size(), ", ", last.name, " [",
                                         absl::StrJoin(last.shape, ", "), "], is in ");
  EXPECT_EQ(LayoutDifference(a, "a", *Layout::Create(fewer, 64 << 10, 2, 7), "b"),
            absl::StrCat("the tensor count: ", Mlp().size(), " in a, ", fewer.size(), " in b",
                         extra, "a only)"));
  EXPECT_EQ(LayoutDifference(*Layout::Create(fewer, 64 << 10, 2, 7), "b", a, "a"),
            absl::StrCat("the tensor count: ", fewer.size(), " in b, ", Mlp().size(), " in a",
                         extra, "a only)"));
}

TEST(LayoutTest, RejectsBadInput) {
  absl::Status s;
  EXPECT_EQ(Layout::Create({}, 1024, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create(Mlp(), 1023, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create(Mlp(), 0, 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create(Mlp(), 1024, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create({{"a", {2}}, {"a", {3}}}, 1024, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create({{"a", {2, 0}}}, 1024, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create({{"a", {-3}}}, 1024, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Layout::Create({{"a", {int64_t{1} << 30, int64_t{1} << 30}}}, 1024, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A tiny spec asking for 2^40 chunks is refused before any is built, and
  // so is one asking for one chunk more than a layout holds.
  EXPECT_EQ(Layout::Create({{"a", {int64_t{1} << 40}}}, 4, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Layout::Create({{"a", {Layout::kMaxChunks}}}, 4, 1, 0).ok());
  s = Layout::Create({{"a", {Layout::kMaxChunks + 1}}}, 4, 1, 0).status();
  EXPECT_NE(s.message().find("more than 262144 chunks of 4 bytes; raise chunk_bytes (--chunk_kb)"),
            std::string::npos)
      << s;
  EXPECT_EQ(Layout::Create({{std::string(2000, 'n'), {2}}}, 1024, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  s = Layout::Create(Mlp(), 6, 1, 0).status();
  EXPECT_NE(s.message().find("chunk_bytes is 6"), std::string::npos) << s;
}

}  // namespace
}  // namespace psync
