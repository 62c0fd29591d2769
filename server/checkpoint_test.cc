#include "server/checkpoint.h"
#include "server/checkpoint_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <limits>
#include <future>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

std::vector<TensorSpec> Model() {
  return {{"fc1.weight", {6, 5}}, {"fc1.bias", {6}}, {"fc2.weight", {3, 6}}, {"fc2.bias", {3}}};
}

// 32-byte chunks: 9 chunks of up to 8 floats over the model's 57 elements.
Layout MakeLayout(int num_servers, std::vector<TensorSpec> tensors = Model()) {
  auto layout = Layout::Create(std::move(tensors), 32, num_servers, 7);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

std::vector<float> Flat(const Layout& layout, float scale = 1.0f) {
  std::vector<float> flat(layout.total_elements());
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = scale * (0.5f * i - 3.0f);
  return flat;
}

std::vector<float> Slice(const std::vector<float>& flat, const ChunkInfo& c, float scale) {
  std::vector<float> out(flat.begin() + c.flat_offset,
                         flat.begin() + c.flat_offset + c.num_elements);
  for (float& v : out) v *= scale;
  return out;
}

// Weights are `flat`; momentum, when kept, is -0.25 * flat.
std::vector<CheckpointChunk> ChunksOf(const Layout& layout, int rank,
                                      const std::vector<float>& flat, bool momentum) {
  std::vector<CheckpointChunk> out;
  for (int32_t id : layout.ChunksOnServer(rank)) {
    auto state = std::make_shared<ChunkState>();
    state->weights = Slice(flat, layout.chunks()[id], 1.0f);
    if (momentum) state->momentum = Slice(flat, layout.chunks()[id], -0.25f);
    out.push_back({id, state});
  }
  return out;
}

CheckpointHeader Header(const Layout& layout, int rank, int64_t version) {
  auto h = MakeCheckpointHeader(layout, rank);
  EXPECT_TRUE(h.ok()) << h.status();
  h->version = version;
  h->generation = 3;
  h->optimizer = "sgd lr=0.1 momentum=0.9 weight_decay=0";
  h->training = "step=5";
  return *h;
}

std::string FilePath(const std::string& dir, int64_t version, int rank, int num_servers) {
  return absl::StrFormat("%s/ckpt-%012d/server-%d-of-%d.safetensors", dir, version, rank,
                         num_servers);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::set<std::string> Names(const std::string& folder) {
  std::set<std::string> out;
  if (DIR* d = opendir(folder.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// fn() run on another thread, waited for up to 10 s. If it is still blocked
// then (opening the FIFO `fifo`), a writer opens the FIFO so that it can
// finish, and the test fails.
template <typename Fn>
auto WithinSeconds(const std::string& fifo, Fn fn) {
  auto result = std::async(std::launch::async, fn);
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    ADD_FAILURE() << "blocked opening the FIFO " << fifo;
  }
  return result.get();
}

// Every chunk of `shard` holds its slice of `flat` (and momentum, if kept).
void ExpectShardMatches(const RestoredShard& shard, int rank, const std::vector<float>& flat,
                        bool momentum) {
  const std::vector<int32_t>& ids = shard.layout.ChunksOnServer(rank);
  ASSERT_EQ(shard.chunks.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const ChunkInfo& c = shard.layout.chunks()[ids[i]];
    EXPECT_EQ(shard.chunks[i].first, ids[i]);
    EXPECT_EQ(shard.chunks[i].second->weights, Slice(flat, c, 1.0f)) << "chunk " << ids[i];
    EXPECT_EQ(shard.chunks[i].second->momentum,
              momentum ? Slice(flat, c, -0.25f) : std::vector<float>{})
        << "chunk " << ids[i];
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir() + "/ckpt_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ + "/ckpt";
  }
  void TearDown() override {
    nftw(root_.c_str(), [](const char* p, const struct stat*, int, FTW*) { return remove(p); },
         16, FTW_DEPTH | FTW_PHYS);
  }

  void Write(const std::string& dir, const Layout& layout, int rank, int64_t version,
             const std::vector<float>& flat, bool momentum = true) {
    ASSERT_TRUE(WriteCheckpoint(dir, layout, Header(layout, rank, version),
                                ChunksOf(layout, rank, flat, momentum)).ok());
  }
  void WriteAll(const std::string& dir, const Layout& layout, int64_t version,
                const std::vector<float>& flat, bool momentum = true) {
    for (int r = 0; r < layout.num_servers(); ++r) Write(dir, layout, r, version, flat, momentum);
  }
  CheckpointScan Scan(int rank, int num_servers) {
    auto scan = ScanCheckpoints(dir_, rank, num_servers);
    EXPECT_TRUE(scan.ok()) << scan.status();
    return scan.ok() ? *scan : CheckpointScan{};
  }

  std::string root_, dir_;
};

TEST_F(CheckpointTest, RoundTripWithMomentum) {
  const Layout layout = MakeLayout(2);
  const std::vector<float> flat = Flat(layout);
  WriteAll(dir_, layout, 10, flat);
  CheckpointScan scan = Scan(1, 2);
  EXPECT_TRUE(scan.refused.empty());
  ASSERT_EQ(scan.candidates.size(), 1u);
  const CheckpointCandidate& c = scan.candidates[0];
  EXPECT_EQ(c.version, 10);
  EXPECT_EQ(c.files, std::vector<std::string>{FilePath(dir_, 10, 1, 2)});
  EXPECT_EQ(c.model_id, *ModelId(layout));
  EXPECT_EQ(c.header.generation, 3);
  EXPECT_EQ(c.header.training, "step=5");
  auto shard = LoadCheckpoint(c, 1, 2);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->layout.fingerprint(), layout.fingerprint());
  EXPECT_EQ(shard->header.optimizer, "sgd lr=0.1 momentum=0.9 weight_decay=0");
  ExpectShardMatches(*shard, 1, flat, true);
}

// Adam's state: the first and the second moment, each restored exactly;
// re-sharding onto another server count carries both.
TEST_F(CheckpointTest, RoundTripWithASecondMoment) {
  const Layout two = MakeLayout(2), three = MakeLayout(3);
  const std::vector<float> flat = Flat(two);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<CheckpointChunk> chunks = ChunksOf(two, rank, flat, true);
    for (CheckpointChunk& c : chunks) {
      auto state = std::make_shared<ChunkState>(*c.state);
      state->second = Slice(flat, two.chunks()[c.chunk_id], 0.5f);
      c.state = state;
    }
    ASSERT_TRUE(WriteCheckpoint(dir_, two, Header(two, rank, 20), chunks).ok());
  }
  CheckpointScan scan = Scan(2, 3);
  ASSERT_EQ(scan.candidates.size(), 1u) << (scan.refused.empty() ? "" : scan.refused[0]);
  auto shard = LoadCheckpoint(scan.candidates[0], 2, 3);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_FALSE(shard->chunks.empty());
  for (const auto& [id, state] : shard->chunks) {
    const ChunkInfo& c = three.chunks()[id];
    EXPECT_EQ(state->weights, Slice(flat, c, 1.0f));
    EXPECT_EQ(state->momentum, Slice(flat, c, -0.25f));
    EXPECT_EQ(state->second, Slice(flat, c, 0.5f)) << id;
  }
}

TEST_F(CheckpointTest, RoundTripWithoutMomentumAndUnusualNames) {
  const Layout layout =
      MakeLayout(1, {{"a,b", {5}}, {"c:d%2C", {2, 3}}, {"x@1", {9}}, {"é", {1}}});
  const std::vector<float> flat = Flat(layout);
  WriteAll(dir_, layout, 0, flat, /*momentum=*/false);
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 1u) << (scan.refused.empty() ? "" : scan.refused[0]);
  EXPECT_EQ(scan.candidates[0].header.tensors[1].name, "c:d%2C");
  auto shard = LoadCheckpoint(scan.candidates[0], 0, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectShardMatches(*shard, 0, flat, false);
}

TEST_F(CheckpointTest, FilesAreStandardSafetensorsAndNoTemporaryFilesRemain) {
  const Layout layout = MakeLayout(2);
  WriteAll(dir_, layout, 1, Flat(layout));
  EXPECT_EQ(Names(dir_ + "/ckpt-000000000001"),
            (std::set<std::string>{"server-0-of-2.safetensors", "server-1-of-2.safetensors"}));
  auto tensors = ReadSafetensors(FilePath(dir_, 1, 0, 2));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), 2 * layout.ChunksOnServer(0).size());
  const ChunkInfo& c = layout.chunks()[layout.ChunksOnServer(0)[1]];
  const std::string name = absl::StrCat(layout.tensors()[c.tensor].name, "@", c.tensor_offset);
  ASSERT_EQ(tensors->count("weights/" + name), 1u) << name;
  EXPECT_EQ(tensors->at("weights/" + name).shape, std::vector<int64_t>{c.num_elements});
  EXPECT_EQ(tensors->at("momentum/" + name).values[0], -0.25f * (0.5f * c.flat_offset - 3.0f));
}

TEST_F(CheckpointTest, CorruptDataByteIsRefused) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  const std::string path = FilePath(dir_, 1, 0, 1);
  std::string bytes = ReadFile(path);
  bytes[bytes.size() - 5] ^= 0x10;
  WriteFile(path, bytes);
  CheckpointScan scan = Scan(0, 1);
  EXPECT_TRUE(scan.candidates.empty());
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_NE(scan.refused[0].find(path), std::string::npos) << scan.refused[0];
  EXPECT_NE(scan.refused[0].find("checksum"), std::string::npos) << scan.refused[0];
}

TEST_F(CheckpointTest, CorruptMetadataValueIsRefused) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  const std::string path = FilePath(dir_, 1, 0, 1);
  std::string bytes = ReadFile(path);
  const size_t at = bytes.find("step=5");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = '6';
  WriteFile(path, bytes);
  CheckpointScan scan = Scan(0, 1);
  EXPECT_TRUE(scan.candidates.empty());
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_NE(scan.refused[0].find("checksum"), std::string::npos) << scan.refused[0];
}

// Entries are counted against the layout before they are looked up: a file
// keeping one of its 9 chunks, or four entries for each, is refused by its
// count; one with a foreign or missing entry among the right count by name.
TEST_F(CheckpointTest, EntryCountAndNamesMustMatchTheLayout) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  const std::string path = FilePath(dir_, 1, 0, 1);
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::vector<float> values(8, 1.0f);
  // The one refusal of a scan after `entries` replaced the file's.
  auto rewrite = [&](const std::vector<SafetensorsEntry>& entries) -> std::string {
    const absl::Status written = WriteSafetensorsFile(path, entries, reader->metadata());
    if (!written.ok()) return written.ToString();
    CheckpointScan scan = Scan(0, 1);
    EXPECT_TRUE(scan.candidates.empty());
    return scan.refused.size() == 1 ? scan.refused[0]
                                    : absl::StrCat(scan.refused.size(), " refusals");
  };
  auto entry = [&](const SafetensorsEntryInfo& e, std::string name) {
    return SafetensorsEntry{std::move(name), e.shape, values.data()};
  };
  const std::vector<SafetensorsEntryInfo> all = reader->entries();  // 9 chunks x 2 slots
  ASSERT_EQ(all.size(), 18u);
  EXPECT_THAT(rewrite({entry(all[0], all[0].name)}),
              HasSubstr("has 1 tensors; the layout puts 9 chunks on this server, expected 1 to "
                        "3 tensors for each"));
  std::vector<SafetensorsEntry> four;
  for (const SafetensorsEntryInfo& e : all) {
    four.push_back(entry(e, e.name));
    four.push_back(entry(e, "x" + e.name));
  }
  EXPECT_THAT(rewrite(four), HasSubstr("has 36 tensors"));
  std::vector<SafetensorsEntry> renamed;
  for (const SafetensorsEntryInfo& e : all) renamed.push_back(entry(e, e.name));
  renamed.back().name = "second/" + renamed.back().name.substr(renamed.back().name.find('/') + 1);
  EXPECT_THAT(rewrite(renamed), HasSubstr("second-moment tensors; the layout puts 9 chunks"));
  renamed.back().name = "weights/fc9.bias@0";
  EXPECT_THAT(rewrite(renamed), HasSubstr("tensor 'weights/fc9.bias@0' is not a chunk"));
}

TEST_F(CheckpointTest, TruncatedFileIsRefused) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  const std::string path = FilePath(dir_, 1, 0, 1);
  ASSERT_EQ(truncate(path.c_str(), ReadFile(path).size() - 4), 0);
  CheckpointScan scan = Scan(0, 1);
  EXPECT_TRUE(scan.candidates.empty());
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_NE(scan.refused[0].find("truncated"), std::string::npos) << scan.refused[0];
}

TEST_F(CheckpointTest, ForeignModelIsReportedWithItsModelId) {
  const Layout ours = MakeLayout(1);
  const Layout foreign = MakeLayout(1, {{"other", {40}}});
  WriteAll(dir_, ours, 1, Flat(ours));
  WriteAll(dir_, foreign, 2, Flat(foreign));
  WriteAll(dir_, ours, 3, Flat(ours));
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 3u);
  EXPECT_EQ(scan.candidates[0].version, 3);
  EXPECT_EQ(scan.candidates[1].version, 2);
  EXPECT_EQ(scan.candidates[0].model_id, *ModelId(ours));
  EXPECT_NE(scan.candidates[1].model_id, scan.candidates[0].model_id);
  EXPECT_EQ(scan.candidates[2].model_id, scan.candidates[0].model_id);
}

TEST_F(CheckpointTest, RankInNameMustMatchMetadata) {
  const Layout layout = MakeLayout(2);
  Write(dir_, layout, 0, 1, Flat(layout));
  ASSERT_EQ(rename(FilePath(dir_, 1, 0, 2).c_str(), FilePath(dir_, 1, 1, 2).c_str()), 0);
  CheckpointScan scan = Scan(1, 2);
  EXPECT_TRUE(scan.candidates.empty());
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_NE(scan.refused[0].find("server 0 of 2; its name says version 1, server 1 of 2"),
            std::string::npos) << scan.refused[0];
}

TEST_F(CheckpointTest, FallsBackToNextNewestWhenNewestIsCorrupt) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  WriteAll(dir_, layout, 2, Flat(layout, 2.0f));
  const std::string path = FilePath(dir_, 2, 0, 1);
  std::string bytes = ReadFile(path);
  bytes[bytes.size() - 1] ^= 1;
  WriteFile(path, bytes);
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 1u);
  EXPECT_EQ(scan.candidates[0].version, 1);
  EXPECT_EQ(scan.refused.size(), 1u);
}

// A diverged job stops before it writes a non-finite weight, so a file
// holding one (its checksum intact) was not written by psync as it is:
// refused by the entry and element, and the scan falls back.
TEST_F(CheckpointTest, NonFiniteWeightsAreRefused) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout), /*momentum=*/false);
  std::vector<float> bad = Flat(layout, 2.0f);
  bad[40] = std::numeric_limits<float>::infinity();  // fc2.weight element 4: chunk @0
  WriteAll(dir_, layout, 2, bad, /*momentum=*/false);
  const std::string path = FilePath(dir_, 2, 0, 1);
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 1u);
  EXPECT_EQ(scan.candidates[0].version, 1);
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_THAT(scan.refused[0], HasSubstr(path + ": entry weights/fc2.weight@0 holds inf at "
                                         "element 4; expected finite weights"));
  bad[40] = std::nanf("");
  WriteAll(dir_, layout, 2, bad, /*momentum=*/true);  // the momentum holds one too
  scan = Scan(0, 1);
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_THAT(scan.refused[0], HasSubstr(": entry weights/fc2.weight@0 holds nan at element 4"));
  // Optimizer state may overflow on a finite step (Adam's second moment to
  // inf) while the weights stay finite: such a file is the job's own.
  std::vector<CheckpointChunk> chunks = ChunksOf(layout, 0, Flat(layout, 3.0f), true);
  auto state = std::make_shared<ChunkState>(*chunks[0].state);
  state->momentum[0] = std::numeric_limits<float>::infinity();
  chunks[0].state = state;
  ASSERT_TRUE(WriteCheckpoint(dir_, layout, Header(layout, 0, 3), chunks).ok());
  scan = Scan(0, 1);
  ASSERT_FALSE(scan.candidates.empty());
  EXPECT_EQ(scan.candidates[0].version, 3);
}

// A value may straddle two pieces of the data section as it is read.
TEST(FirstNonFiniteTest, FindsTheFirstNonFiniteValueOfTheCheckedEntriesInAnyPieces) {
  const std::vector<float> values = {1, 2, std::nanf(""), 4, 5, -INFINITY, 7, 8};
  SafetensorsEntryInfo first{"a", {3}, 0, 12}, second{"b", {5}, 12, 32};
  std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  for (size_t piece : {1, 3, 4, 5, 32}) {
    SCOPED_TRACE(piece);
    checkpoint_internal::FirstNonFinite both({&first, &second}), only_b({&second});
    for (size_t at = 0; at < bytes.size(); at += piece) {
      both.Add(bytes.data() + at, std::min(piece, bytes.size() - at));
      only_b.Add(bytes.data() + at, std::min(piece, bytes.size() - at));
    }
    ASSERT_EQ(both.found(), &first);
    EXPECT_EQ(both.element(), 2u);
    ASSERT_EQ(only_b.found(), &second);
    EXPECT_EQ(only_b.element(), 2u);
    EXPECT_EQ(only_b.value(), -INFINITY);
  }
  checkpoint_internal::FirstNonFinite none({&first});
  none.Add(bytes.data(), 8);
  EXPECT_EQ(none.found(), nullptr);
}

TEST_F(CheckpointTest, LoadRevalidatesTheFiles) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 1u);
  const std::string path = FilePath(dir_, 1, 0, 1);
  std::string bytes = ReadFile(path);
  bytes[bytes.size() - 1] ^= 1;
  WriteFile(path, bytes);
  auto shard = LoadCheckpoint(scan.candidates[0], 0, 1);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss) << shard.status();
}

// A candidate LoadCheckpoint was not given by a scan of these files: each
// mismatch is DataLoss, by what it found.
TEST_F(CheckpointTest, LoadRefusesFilesThatDoNotMakeTheCandidate) {
  const Layout two = MakeLayout(2);
  const std::vector<float> flat = Flat(two);
  WriteAll(dir_, two, 1, flat);
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 1u);
  ASSERT_EQ(scan.candidates[0].files.size(), 2u);
  auto expect_data_loss = [](const CheckpointCandidate& c, const std::string& message) {
    auto shard = LoadCheckpoint(c, 0, 1);
    EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss) << shard.status();
    EXPECT_NE(shard.status().message().find(message), absl::string_view::npos) << shard.status();
  };
  CheckpointCandidate missing = scan.candidates[0];
  missing.files.pop_back();
  expect_data_loss(missing, " is in none of the files of version 1");
  CheckpointCandidate repeated = scan.candidates[0];
  repeated.files[1] = repeated.files[0];
  expect_data_loss(repeated, "' is repeated or does not fit chunk ");
  CheckpointCandidate moved_on = scan.candidates[0];
  moved_on.version = 2;
  expect_data_loss(moved_on, ": version 1, model_id ");
  // One server kept momentum, the other none.
  Write(dir_, two, 1, 1, flat, /*momentum=*/false);
  expect_data_loss(Scan(0, 1).candidates.at(0), "LoadCheckpoint: 1 of 2 files keep ");
}

TEST_F(CheckpointTest, ReshardsTwoToThreeAndThreeToOne) {
  const Layout two = MakeLayout(2), three = MakeLayout(3);
  const std::vector<float> flat = Flat(two);
  WriteAll(dir_, two, 4, flat);
  for (int r = 0; r < 3; ++r) {
    CheckpointScan scan = Scan(r, 3);
    ASSERT_EQ(scan.candidates.size(), 1u);
    EXPECT_EQ(scan.candidates[0].files.size(), 2u);
    auto shard = LoadCheckpoint(scan.candidates[0], r, 3);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->header.server_rank, r);
    EXPECT_EQ(shard->header.layout_fingerprint, three.fingerprint());
    ExpectShardMatches(*shard, r, flat, true);
    // The three servers go on from the restored state and write version 5.
    std::vector<CheckpointChunk> chunks;
    for (const auto& [id, state] : shard->chunks) chunks.push_back({id, state});
    CheckpointHeader h = shard->header;
    h.version = 5;
    ASSERT_TRUE(WriteCheckpoint(dir_, shard->layout, h, chunks).ok());
  }
  CheckpointScan scan = Scan(0, 1);
  ASSERT_EQ(scan.candidates.size(), 2u);
  EXPECT_EQ(scan.candidates[0].version, 5);
  EXPECT_EQ(scan.candidates[0].files.size(), 3u);
  auto shard = LoadCheckpoint(scan.candidates[0], 0, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectShardMatches(*shard, 0, flat, true);
}

TEST_F(CheckpointTest, IncompleteSetIsRefused) {
  const Layout three = MakeLayout(3);
  Write(dir_, three, 0, 1, Flat(three));
  Write(dir_, three, 1, 1, Flat(three));
  CheckpointScan scan = Scan(0, 2);
  EXPECT_TRUE(scan.candidates.empty());
  ASSERT_EQ(scan.refused.size(), 2u);
  EXPECT_NE(scan.refused[0].find("incomplete set: 2 of 3"), std::string::npos) << scan.refused[0];
}

TEST_F(CheckpointTest, PruneKeepsNewestAndOtherRanks) {
  const Layout layout = MakeLayout(2);
  for (int v = 1; v <= 4; ++v) WriteAll(dir_, layout, v, Flat(layout));
  const std::string folder4 = dir_ + "/ckpt-000000000004";
  WriteFile(folder4 + "/server-0-of-2.safetensors.tmp.999.0", "stale");
  WriteFile(folder4 + "/server-1-of-2.safetensors.tmp.999.0", "stale");
  ASSERT_TRUE(PruneCheckpoints(dir_, 0, 2, 2).ok());
  for (int v = 1; v <= 4; ++v) {
    EXPECT_EQ(Exists(FilePath(dir_, v, 0, 2)), v >= 3) << v;
    EXPECT_TRUE(Exists(FilePath(dir_, v, 1, 2))) << v;
  }
  EXPECT_FALSE(Exists(folder4 + "/server-0-of-2.safetensors.tmp.999.0"));
  EXPECT_TRUE(Exists(folder4 + "/server-1-of-2.safetensors.tmp.999.0"));
  ASSERT_TRUE(PruneCheckpoints(dir_, 1, 2, 2).ok());
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"ckpt-000000000003", "ckpt-000000000004"}));
  EXPECT_EQ(PruneCheckpoints(dir_, 0, 2, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, WriteFailureKeepsThePreviousCheckpoint) {
  const Layout layout = MakeLayout(1);
  const std::vector<float> flat = Flat(layout);
  WriteAll(dir_, layout, 1, flat);
  // A file size limit makes the write fail with EFBIG (root ignores chmod).
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  sighandler_t old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 300;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status s = WriteCheckpoint(dir_, layout, Header(layout, 0, 2),
                                   ChunksOf(layout, 0, Flat(layout, 3.0f), true));
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(FilePath(dir_, 2, 0, 1)), std::string::npos) << s;
  EXPECT_NE(s.message().find("File too large"), std::string::npos) << s;
  EXPECT_TRUE(Names(dir_ + "/ckpt-000000000002").empty());
  CheckpointScan scan = Scan(0, 1);
  EXPECT_TRUE(scan.refused.empty());
  ASSERT_EQ(scan.candidates.size(), 1u);
  auto shard = LoadCheckpoint(scan.candidates[0], 0, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectShardMatches(*shard, 0, flat, true);

  // Once writes succeed again, pruning removes the empty folder the failed
  // write left, as soon as it is older than every version kept.
  for (int v = 3; v <= 4; ++v) WriteAll(dir_, layout, v, flat);
  ASSERT_TRUE(PruneCheckpoints(dir_, 0, 1, 2).ok());
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"ckpt-000000000003", "ckpt-000000000004"}));
}

TEST_F(CheckpointTest, WriteRejectsChunksThatDoNotMatchTheLayout) {
  const Layout layout = MakeLayout(2);
  const std::vector<float> flat = Flat(layout);
  std::vector<CheckpointChunk> chunks = ChunksOf(layout, 0, flat, true);
  auto write = [&](const CheckpointHeader& h, std::vector<CheckpointChunk> c) {
    return WriteCheckpoint(dir_, layout, h, c).code();
  };
  const CheckpointHeader h = Header(layout, 0, 1);
  EXPECT_EQ(write(h, {chunks.begin() + 1, chunks.end()}), absl::StatusCode::kInvalidArgument);
  std::vector<CheckpointChunk> twice = chunks;
  twice.back() = twice.front();
  EXPECT_EQ(write(h, twice), absl::StatusCode::kInvalidArgument);
  std::vector<CheckpointChunk> short_chunk = chunks;
  auto state = std::make_shared<ChunkState>(*short_chunk[0].state);
  state->weights.pop_back();
  short_chunk[0].state = state;
  EXPECT_EQ(write(h, short_chunk), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write(h, ChunksOf(layout, 1, flat, true)), absl::StatusCode::kInvalidArgument);
  CheckpointHeader other = h;
  other.tensors[0].shape = {5, 6};
  EXPECT_EQ(write(other, chunks), absl::StatusCode::kInvalidArgument);
  other = h;
  other.model_id ^= 1;
  EXPECT_EQ(write(other, chunks), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Exists(dir_));
}

TEST_F(CheckpointTest, MissingDirectoryIsAnEmptyScanAndAFileIsAnError) {
  CheckpointScan scan = Scan(0, 1);
  EXPECT_TRUE(scan.candidates.empty() && scan.refused.empty());
  WriteFile(dir_, "not a folder");
  EXPECT_FALSE(ScanCheckpoints(dir_, 0, 1).ok());
  EXPECT_EQ(ScanCheckpoints(root_, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

// A FIFO named like a server file must neither hang a starting server's
// scan nor psync_ckpt list.
TEST_F(CheckpointTest, FifoIsRefusedWithoutBlocking) {
  const Layout layout = MakeLayout(1);
  WriteAll(dir_, layout, 1, Flat(layout));
  ASSERT_EQ(mkdir((dir_ + "/ckpt-000000000002").c_str(), 0755), 0);
  const std::string fifo = FilePath(dir_, 2, 0, 1);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  CheckpointScan scan = WithinSeconds(fifo, [&] { return Scan(0, 1); });
  ASSERT_EQ(scan.candidates.size(), 1u);
  EXPECT_EQ(scan.candidates[0].version, 1);
  ASSERT_EQ(scan.refused.size(), 1u);
  EXPECT_NE(scan.refused[0].find(fifo + ": not a regular file"), std::string::npos)
      << scan.refused[0];
  auto files = WithinSeconds(fifo, [&] { return ListCheckpointFiles({dir_}); });
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, fifo);
  EXPECT_EQ((*files)[0].status.code(), absl::StatusCode::kInvalidArgument) << (*files)[0].status;
  EXPECT_TRUE((*files)[1].status.ok()) << (*files)[1].status;
}

// Two jobs writing one directory would prune and restore each other's
// checkpoints: a server rank's lock is held while its manager lives.
TEST_F(CheckpointTest, ARankOfADirectoryHasOneManagerAtATime) {
  CheckpointManagerOptions o;
  o.dir = dir_;
  o.num_servers = 2;
  auto first = CheckpointManager::Open(o);
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Status second = CheckpointManager::Open(o).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.message(),
              HasSubstr(absl::StrCat("where a running server 0 (process ", getpid(), ", holding ",
                                     dir_, "/.lock-server-0) writes its checkpoints; expected a "
                                     "directory no other job uses")));
  o.server_rank = 1;  // the job's other server
  EXPECT_TRUE(CheckpointManager::Open(o).ok());
  first->reset();
  o.server_rank = 0;  // a restarted server 0
  EXPECT_TRUE(CheckpointManager::Open(o).ok());
}

// The lock file holds the process id: a link planted in its place, or a
// FIFO, is refused rather than written through.
TEST_F(CheckpointTest, ALockFileThatIsNotARegularFileIsRefused) {
  std::filesystem::create_directories(dir_);
  const std::string victim = root_ + "/victim.txt";
  std::ofstream(victim) << "important";
  const std::string lock = dir_ + "/.lock-server-0";
  std::filesystem::create_symlink(victim, lock);
  CheckpointManagerOptions o;
  o.dir = dir_;
  absl::Status s = CheckpointManager::Open(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(lock + " is not a regular file; expected the lock file a "
                                     "server creates there, or none"));
  std::stringstream kept;
  kept << std::ifstream(victim).rdbuf();
  EXPECT_EQ(kept.str(), "important");
  std::filesystem::remove(lock);
  ASSERT_EQ(mkfifo(lock.c_str(), 0644), 0);
  s = CheckpointManager::Open(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(lock + " is not a regular file"));
}

TEST_F(CheckpointTest, ExportRefusesASetOfTwoModels) {
  const Layout ours = MakeLayout(2), foreign = MakeLayout(2, {{"other", {40}}});
  Write(dir_, ours, 0, 1, Flat(ours));
  Write(dir_, foreign, 1, 1, Flat(foreign));
  const std::string out = root_ + "/model.safetensors";
  auto exported = ExportCheckpoint({dir_}, -1, out);
  EXPECT_EQ(exported.status().code(), absl::StatusCode::kNotFound) << exported.status();
  EXPECT_NE(exported.status().message().find(FilePath(dir_, 1, 1, 2) +
                                             ": model_id differs from server 0's"),
            std::string::npos)
      << exported.status();
  EXPECT_FALSE(Exists(out));
}

TEST_F(CheckpointTest, ExportGathersTwoServersFromTwoDirectories) {
  const Layout layout = MakeLayout(2);
  const std::string d0 = root_ + "/d0", d1 = root_ + "/d1", out = root_ + "/model.safetensors";
  for (int v = 1; v <= 2; ++v) {
    Write(d0, layout, 0, v, Flat(layout, v));
    Write(d1, layout, 1, v, Flat(layout, v));
  }
  Write(d0, layout, 0, 3, Flat(layout, 3));  // server 1 never wrote version 3
  for (int64_t v : {int64_t{-1}, int64_t{1}}) {
    auto exported = ExportCheckpoint({d0, d1}, v, out);
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(*exported, v == -1 ? 2 : 1);
    const std::vector<float> flat = Flat(layout, *exported);
    auto tensors = ReadSafetensors(out);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    ASSERT_EQ(tensors->size(), layout.tensors().size());
    for (size_t t = 0; t < layout.tensors().size(); ++t) {
      const LoadedTensor& got = tensors->at(layout.tensors()[t].name);
      EXPECT_EQ(got.shape, layout.tensors()[t].shape);
      const auto begin = flat.begin() + layout.tensor_offset(t);
      EXPECT_EQ(got.values, std::vector<float>(begin, begin + got.values.size()));
    }
  }
  auto missing = ExportCheckpoint({d0, d1}, 3, out);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("1 of 2 server files"), std::string::npos)
      << missing.status();

  // Exporting over a checkpoint file, however the path is spelled, would
  // destroy its version: refused, and the file is kept.
  const std::string input = FilePath(d0, 1, 0, 2);
  const std::string spelled = root_ + "/./d0/" + input.substr(d0.size() + 1);
  auto over_input = ExportCheckpoint({d0, d1}, 2, spelled);
  EXPECT_EQ(over_input.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over_input.status().message().find("is the checkpoint file " + input),
            std::string::npos)
      << over_input.status();
  EXPECT_TRUE(checkpoint_internal::ValidateCheckpointFile(input).ok());

  auto files = ListCheckpointFiles({d0, d1});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 5u);
  EXPECT_EQ((*files)[0].version, 3);
  EXPECT_EQ((*files)[1].path, FilePath(d0, 2, 0, 2));
  EXPECT_EQ((*files)[2].path, FilePath(d1, 2, 1, 2));
  for (const CheckpointFileInfo& f : *files) EXPECT_TRUE(f.status.ok()) << f.status;
  EXPECT_FALSE(ListCheckpointFiles({root_ + "/none"}).ok());
}

}  // namespace
}  // namespace psync
