// Hostile checkpoint headers against the real readers: psync_ckpt list and a
// starting psync_server (its checkpoint scan) refuse each file by name with
// the limit it breaks, and neither process ever holds 64 MB. Among them are
// the files that cost 0.4 to 1 GB before the reader had limits: a ~100 MiB
// header of "shape":[0,0,...] and 1.8 million zero-size tensors; and a
// small file whose metadata names the largest layout psync accepts.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/format/safetensors.h"
#include "common/model/layout.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr int64_t kPeakLimitKb = 64 * 1000;  // 64 MB
constexpr uint64_t kMiB = 1 << 20;

// One hostile file: its header text (streamed in pieces, so the test itself
// stays small), the length field written (the text's length unless set),
// the file's total size (zeros after the header; a hole when large), and
// what its refusal must say.
struct Hostile {
  std::string name;
  std::function<void(std::ofstream&)> write_header;
  std::string reason;
  uint64_t length_field = 0;  // 0: the header's real length
  uint64_t file_bytes = 0;    // 0: just the length field and the header
  // When set, writes the whole file at the path instead.
  std::function<void(const std::string& path, int64_t version)> write_file;
};

// A valid file of version `version` with a checkpoint's metadata
// (docs/checkpoint_format.md) for a model of one tensor cut into
// Layout::kMaxChunks 4-byte chunks, but with one tensor entry: a few
// hundred bytes that name the largest layout psync accepts.
void WriteManyChunks(const std::string& path, int64_t version) {
  auto layout = Layout::Create({{"big", {Layout::kMaxChunks}}}, 4, 1, 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto header = MakeCheckpointHeader(*layout, 0);
  ASSERT_TRUE(header.ok()) << header.status();
  const SafetensorsMetadata metadata = {
      {"format", "psync-checkpoint-1"}, {"version", absl::StrCat(version)},
      {"generation", "1"}, {"server_rank", "0"}, {"num_servers", "1"},
      {"tensors", absl::StrCat("big:", Layout::kMaxChunks)}, {"chunk_bytes", "4"},
      {"init_seed", "0"}, {"layout_fingerprint", absl::StrCat(header->layout_fingerprint)},
      {"model_id", absl::StrCat(header->model_id)}, {"optimizer", "sgd"}, {"training", ""},
      {"sha256", std::string(64, '0')}};
  const float one = 1.0f;
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"weights/big@0", {1}, &one}}, metadata).ok());
}

// `count` copies of `piece`, written 1 MiB at a time.
void Repeat(std::ofstream& out, const std::string& piece, uint64_t count) {
  std::string block;
  for (uint64_t i = 0; i < count; ++i) {
    block += piece;
    if (block.size() >= kMiB) {
      out << block;
      block.clear();
    }
  }
  out << block;
}

std::vector<Hostile> HostileFiles() {
  constexpr uint64_t kZeroDims = 52'000'000;  // "0," each: 104 MB, under 100 MiB
  constexpr uint64_t kZeroEntries = 1'800'000;
  return {
      {"zero dimensions",
       [](std::ofstream& out) {
         out << "{\"t\":{\"dtype\":\"F32\",\"shape\":[";
         Repeat(out, "0,", kZeroDims - 1);
         out << "0],\"data_offsets\":[0,0]}}";
       },
       absl::StrCat("tensor 't' has ", kZeroDims, " dimensions, expected at most 64")},
      {"zero-size tensors",
       [](std::ofstream& out) {
         out << "{";
         std::string block;
         for (uint64_t i = 0; i < kZeroEntries; ++i) {
           // Hex names keep the header under the 100 MiB limit.
           absl::StrAppend(&block, i == 0 ? "" : ",", "\"", absl::Hex(i),
                           "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
           if (block.size() >= kMiB) {
             out << block;
             block.clear();
           }
         }
         out << block << "}";
       },
       absl::StrCat("header has ", kZeroEntries, " tensors, expected at most 786432")},
      {"nesting",
       [](std::ofstream& out) {
         out << "{\"__metadata__\":{\"k\":";
         Repeat(out, "{\"k\":", 2'000'000);
       },
       "metadata 'k' is not a string"},
      {"nested shape",
       [](std::ofstream& out) {
         out << "{\"t\":{\"dtype\":\"F32\",\"shape\":";
         Repeat(out, "[", 10'000'000);
       },
       "expected a non-negative integer"},
      {"long name",
       [](std::ofstream& out) {
         out << "{\"";
         Repeat(out, "n", 20 * kMiB);
         out << "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
       },
       absl::StrCat("a tensor name has ", 20 * kMiB, " bytes, expected at most 65536")},
      {"long metadata",
       [](std::ofstream& out) {
         out << "{\"__metadata__\":{\"format\":\"";
         Repeat(out, "m", 20 * kMiB);
         out << "\"}}";
       },
       absl::StrCat("a metadata value has ", 20 * kMiB, " bytes, expected at most 8388608")},
      {"length past the file",
       [](std::ofstream& out) { out << "{}"; },
       "header length 9223372036854775808 exceeds the file (10 bytes)", uint64_t{1} << 63},
      {"length over the limit",
       [](std::ofstream& out) { out << "{}"; },
       "header length 209715200 exceeds the limit of 104857600 bytes", 200 * kMiB,
       201 * kMiB},
      {"many chunks", nullptr,
       absl::StrCat("has 1 tensors; the layout puts ", Layout::kMaxChunks,
                    " chunks on this server, expected 1 to 3 tensors for each"),
       0, 0, WriteManyChunks},
  };
}

// Writes each hostile file as version i+1 of server 0 of 1 under `dir`;
// returns each file's path.
std::vector<std::string> WriteHostileFiles(const std::string& dir,
                                           const std::vector<Hostile>& files) {
  std::vector<std::string> paths;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string folder = absl::StrFormat("%s/ckpt-%012d", dir, i + 1);
    EXPECT_EQ(::mkdir(folder.c_str(), 0755), 0) << folder;
    const std::string path = folder + "/server-0-of-1.safetensors";
    paths.push_back(path);
    if (files[i].write_file) {
      files[i].write_file(path, static_cast<int64_t>(i + 1));
      continue;
    }
    {
      std::ofstream out(path, std::ios::binary);
      out << std::string(8, '\0');
      files[i].write_header(out);
    }
    uint64_t length = files[i].length_field;
    if (length == 0) length = std::filesystem::file_size(path) - 8;
    std::string le(8, '\0');
    for (int b = 0; b < 8; ++b) le[b] = static_cast<char>(length >> (8 * b));
    std::fstream patch(path, std::ios::binary | std::ios::in | std::ios::out);
    patch.write(le.data(), 8);
    patch.close();
    if (files[i].file_bytes != 0) {
      EXPECT_EQ(::truncate(path.c_str(), static_cast<off_t>(files[i].file_bytes)), 0) << path;
    }
  }
  return paths;
}

// Whether one line of `output` names `path` and then `reason`.
bool Refused(const std::string& output, const std::string& path, const std::string& reason) {
  for (const std::string& line : LinesWith(output, path + ": ")) {
    if (Contains(line.substr(line.find(path)), reason)) return true;
  }
  return false;
}

// VmHWM of a live process, in kB; -1 if unreadable.
int64_t PeakKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %lld kB", &kb) == 1) return kb;
  }
  return -1;
}

class CheckpointLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(FreshDir("hostile"));
    files_ = new std::vector<Hostile>(HostileFiles());
    paths_ = new std::vector<std::string>(WriteHostileFiles(*dir_, *files_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete paths_;
    delete files_;
    delete dir_;
  }
  static std::string* dir_;
  static std::vector<Hostile>* files_;
  static std::vector<std::string>* paths_;
};
std::string* CheckpointLimitsTest::dir_ = nullptr;
std::vector<Hostile>* CheckpointLimitsTest::files_ = nullptr;
std::vector<std::string>* CheckpointLimitsTest::paths_ = nullptr;

TEST_F(CheckpointLimitsTest, ListRefusesEachFileByNameUnder64MB) {
  const Ended list = RunToEnd({Runfile("server/psync_ckpt"), "list", "--checkpoint_dir=" + *dir_});
  EXPECT_EQ(list.exit_code, 0) << list.output;
  for (size_t i = 0; i < files_->size(); ++i) {
    EXPECT_TRUE(Refused(list.output, "INVALID  " + (*paths_)[i], (*files_)[i].reason))
        << (*files_)[i].name << "\n" << list.output;
  }
  // psync_ckpt was waited for: its peak is among the children's (the
  // largest child's; every child of this test must stay under the limit).
  // A child's peak includes what it shared with this test before exec, so
  // the test never holds a hostile file in memory.
  struct rusage usage;
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &usage), 0);
  std::printf("psync_ckpt list: peak %ld kB\n", usage.ru_maxrss);
  EXPECT_LT(usage.ru_maxrss, kPeakLimitKb);
}

TEST_F(CheckpointLimitsTest, ServerStartRefusesEachFileByNameUnder64MB) {
  std::unique_ptr<Subprocess> server = StartProcess(
      {Runfile("server/psync_server"), "--port=0", "--checkpoint_dir=" + *dir_}, "server");
  ASSERT_NE(server, nullptr);
  // The scan is over before the server listens.
  ASSERT_TRUE(WaitForOutput(*server, "listening on", absl::Now() + absl::Seconds(60)))
      << server->output();
  const int64_t peak_kb = PeakKb(server->pid());
  const std::string output = server->output();
  EXPECT_EQ(server->Stop(absl::Seconds(10)), 0) << output;
  for (size_t i = 0; i < files_->size(); ++i) {
    EXPECT_TRUE(Refused(output, "checkpoint refused: " + (*paths_)[i], (*files_)[i].reason))
        << (*files_)[i].name << "\n" << output;
  }
  std::printf("psync_server start: peak %lld kB\n", static_cast<long long>(peak_kb));
  EXPECT_GT(peak_kb, 0);
  EXPECT_LT(peak_kb, kPeakLimitKb);
}

}  // namespace
}  // namespace psync
