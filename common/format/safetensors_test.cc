#include "common/format/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
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

std::string Header(const std::string& json) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(uint64_t(json.size()) >> (8 * i));
  return len + json;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(SafetensorsTest, GeneralWriterAndReaderKeepEntriesAndMetadata) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1.5f};
  const std::vector<SafetensorsEntry> entries = {{"b/x@0", {1}, b.data()},
                                                 {"a \"quoted\"", {2, 3}, a.data()},
                                                 {"empty", {0}, nullptr}};
  const SafetensorsMetadata metadata = {{"k", "line\nbreak \\ \"q\" \x01 é"}, {"other", ""}};
  const std::string path = TempPath("general.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, entries, metadata).ok());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->metadata(), metadata);
  ASSERT_EQ(reader->entries().size(), 3u);
  EXPECT_EQ(reader->entries()[0].name, "b/x@0");  // data order
  EXPECT_EQ(reader->entries()[1].name, "a \"quoted\"");
  EXPECT_EQ(reader->entries()[1].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(reader->data_bytes(), 28u);
  std::string data;
  ASSERT_TRUE(reader->StreamData([&](uint64_t pos, const char* p, size_t n) {
    EXPECT_EQ(pos, data.size());
    data.append(p, n);
  }).ok());
  EXPECT_EQ(data.size(), 28u);
  EXPECT_EQ(std::memcmp(data.data() + 4, a.data(), 24), 0);
  // Only the final file remains.
  std::set<std::string> names;
  DIR* d = opendir(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp");
  while (dirent* e = d ? readdir(d) : nullptr) names.insert(e->d_name);
  if (d) closedir(d);
  for (const std::string& n : names) {
    EXPECT_EQ(n.find("general.safetensors.tmp"), std::string::npos) << n;
  }
}

TEST(SafetensorsTest, OtherDtypesRoundTripWhereTheReaderAcceptsThem) {
  const std::vector<int64_t> counts = {7, -1};
  const std::vector<uint16_t> halves = {0x3c00, 0xc000, 0x7bff};
  const std::vector<double> doubles = {0.1};
  const std::vector<uint8_t> flags = {1, 0, 1, 1};
  const float f = 2.5f;
  const std::vector<SafetensorsEntry> entries = {
      {"bn.num_batches_tracked", {2}, counts.data(), SafetensorsDtype::kI64},
      {"h", {3}, halves.data(), SafetensorsDtype::kF16},
      {"w", {1}, &f},
      {"d", {}, doubles.data(), SafetensorsDtype::kF64},
      {"mask", {2, 2}, flags.data(), SafetensorsDtype::kBool}};
  const std::string path = TempPath("dtypes.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, entries, {}).ok());
  auto reader = SafetensorsReader::Open(path, SafetensorsDtypes::kAll);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(reader->entries().size(), 5u);
  const std::vector<SafetensorsEntryInfo>& e = reader->entries();
  EXPECT_EQ(e[0].dtype, SafetensorsDtype::kI64);
  EXPECT_EQ(e[0].NumElements(), 2u);
  EXPECT_EQ(e[1].dtype, SafetensorsDtype::kF16);
  EXPECT_EQ(e[1].end - e[1].begin, 6u);
  EXPECT_EQ(e[2].dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(e[3].dtype, SafetensorsDtype::kF64);
  EXPECT_TRUE(e[3].shape.empty());
  EXPECT_EQ(e[4].dtype, SafetensorsDtype::kBool);
  EXPECT_EQ(reader->data_bytes(), 16u + 6 + 4 + 8 + 4);
  std::vector<int64_t> got_counts(2);
  std::vector<uint16_t> got_halves(3);
  double got_double = 0;
  std::vector<uint8_t> got_flags(4);
  std::vector<char*> dest = {reinterpret_cast<char*>(got_counts.data()),
                             reinterpret_cast<char*>(got_halves.data()), nullptr,
                             reinterpret_cast<char*>(&got_double),
                             reinterpret_cast<char*>(got_flags.data())};
  ASSERT_TRUE(reader->ReadEntries(dest, [](const char*, size_t) {}).ok());
  EXPECT_EQ(got_counts, counts);
  EXPECT_EQ(got_halves, halves);
  EXPECT_EQ(got_double, 0.1);
  EXPECT_EQ(got_flags, flags);

  // psync's own readers stay F32-only, naming the tensor and its dtype.
  absl::Status s = SafetensorsReader::Open(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'bn.num_batches_tracked' has dtype 'I64', expected F32"),
            std::string::npos)
      << s;
}

TEST(SafetensorsTest, DtypesTorchLacksAreRefusedNamingThem) {
  const std::string p = TempPath("u16.safetensors");
  WriteBytes(p, Header(R"({"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})") +
                    std::string(4, '\0'));
  absl::Status s = SafetensorsReader::Open(p, SafetensorsDtypes::kAll).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'a' has dtype 'U16', expected one of F64, F32, F16, BF16, "
                             "I64, I32, I16, I8, U8, BOOL"),
            std::string::npos)
      << s;
  // A byte range is checked against the dtype's element size.
  WriteBytes(p, Header(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})") +
                    std::string(8, '\0'));
  s = SafetensorsReader::Open(p, SafetensorsDtypes::kAll).status();
  EXPECT_NE(s.message().find("expected 16 bytes for its shape"), std::string::npos) << s;
  EXPECT_EQ(ParseSafetensorsDtype("BF16").value(), SafetensorsDtype::kBF16);
  EXPECT_EQ(SafetensorsDtypeName(SafetensorsDtype::kBool), "BOOL");
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kBF16), 2u);
}

TEST(SafetensorsTest, WriterRefusesRepeatedNamesAndMissingFolders) {
  const float x = 1;
  EXPECT_EQ(WriteSafetensorsFile(TempPath("r"), {{"a", {1}, &x}, {"a", {1}, &x}}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = WriteSafetensorsFile(TempPath("no/such/dir/f"), {{"a", {1}, &x}}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("no/such/dir/f"), std::string::npos) << s;
}

TEST(SafetensorsTest, StrictReaderRefusesMalformedFiles) {
  const std::string p = TempPath("strict.safetensors");
  const std::string data(16, '\0');
  // A tensor entry: "name":{...}.
  auto t = [](const std::string& name, const std::string& shape, int begin, int end) {
    return absl::StrCat("\"", name, "\":{\"dtype\":\"F32\",\"shape\":[", shape,
                        "],\"data_offsets\":[", begin, ",", end, "]}");
  };
  const std::string a4 = t("a", "4", 0, 16);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{" + t("a", "2", 0, 8) + "," + t("b", "2", 4, 12) + "}", "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", "gap"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "cover"},
      {"{" + a4 + "," + t("a", "0", 16, 16) + "}", "twice"},
      {R"({"__metadata__":{"k":"1","k":"2"},)" + a4 + "}", "twice"},
      {R"({"__metadata__":{"k":1},)" + a4 + "}", "not a string"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}} x)", "after the header"},
      {R"({"a":{"dtype":"F32","shape":[4]}})", "lacks"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}})", "unknown field"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "expected 12 bytes"},
      {"{" + t("a", "99999999999999999999", 0, 16) + "}", "too large"},
      {R"({"a\q":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "bad escape"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16])", "expected"},
      {R"({"a)", "unterminated"},
  };
  for (const auto& [json, expected] : cases) {
    WriteBytes(p, Header(json) + data);
    auto r = SafetensorsReader::Open(p);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status();
  }
  WriteBytes(p, Header("{}").substr(0, 8) + "{");
  EXPECT_NE(SafetensorsReader::Open(p).status().message().find("exceeds the file"),
            std::string::npos);
}

TEST(SafetensorsTest, LimitsAreRefusedNamingTheValueForEveryDtypeSet) {
  const std::string p = TempPath("limits.safetensors");
  const std::string data(16, '\0');
  auto ones = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "1,";
    return s;
  };
  auto tensor = [](const std::string& name, const std::string& shape) {
    return absl::StrCat("{\"", name, "\":{\"dtype\":\"F32\",\"shape\":[", shape,
                        "],\"data_offsets\":[0,16]}");
  };
  const std::string long_name(kSafetensorsMaxNameBytes + 1, 'n');
  const std::string big_value(kSafetensorsMaxMetadataBytes, 'v');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tensor("a", ones(64) + "4") + "}", "tensor 'a' has 65 dimensions, expected at most 64"},
      {tensor(long_name, "4") + "}", "a tensor name has 65537 bytes, expected at most 65536"},
      {R"({"__metadata__":{"k":")" + big_value + "\"}," + tensor("a", "4").substr(1) + "}",
       "__metadata__ has more than 8388608 bytes"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16,32]}})", "has 3 data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})",
       "ends past the data section (16 bytes"},
  };
  for (SafetensorsDtypes accepted : {SafetensorsDtypes::kF32Only, SafetensorsDtypes::kAll}) {
    for (const auto& [json, expected] : cases) {
      WriteBytes(p, Header(json) + data);
      auto r = SafetensorsReader::Open(p, accepted);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << expected;
      EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status();
      EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status();
    }
  }
  // At the limits, files are read.
  WriteBytes(p, Header(tensor("a", ones(63) + "4") + "}") + data);
  auto at_limit = SafetensorsReader::Open(p);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->entries()[0].shape.size(), kSafetensorsMaxDims);
  WriteBytes(p, Header(tensor(long_name.substr(1), "4") + "}") + data);
  EXPECT_TRUE(SafetensorsReader::Open(p).ok());
  // A header length past the file or over the limit is refused before any
  // of it is read.
  std::string len(8, '\0');
  len[7] = static_cast<char>(0x80);
  WriteBytes(p, len + "{}");
  EXPECT_NE(SafetensorsReader::Open(p).status().message().find(
                "header length 9223372036854775808 exceeds the file (10 bytes)"),
            std::string::npos);
}

TEST(SafetensorsTest, WriterRefusesWhatTheReaderWould) {
  const float x[4] = {1, 2, 3, 4};
  std::vector<int64_t> shape(kSafetensorsMaxDims + 1, 1);
  shape.back() = 4;
  absl::Status s = WriteSafetensorsFile(TempPath("w"), {{"a", shape, x}}, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("65 dimensions"), std::string::npos) << s;
  s = WriteSafetensorsFile(TempPath("w"), {{"a", {4}, x}},
                           {{"k", std::string(kSafetensorsMaxMetadataBytes, 'v')}});
  EXPECT_NE(s.message().find("metadata of 8388609 bytes, expected at most 8388608"),
            std::string::npos) << s;
}

// Headers far longer than the reader's window, with escapes across its
// edges, read back exactly.
TEST(SafetensorsTest, LongHeadersRoundTrip) {
  std::string value;
  for (int i = 0; i < 50000; ++i) value += (i % 3 == 0) ? "\x01" : (i % 3 == 1) ? "\"" : "\xc3\xa9";
  std::vector<float> values(3000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  std::vector<SafetensorsEntry> entries;
  for (int i = 0; i < 3000; ++i) {
    entries.push_back({absl::StrCat("layer", i, ".\x02weight"), {1}, &values[i]});
  }
  const std::string path = TempPath("long.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, entries, {{"v", value}}).ok());
  ASSERT_GT(std::filesystem::file_size(path), 4u << 16);
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->metadata().at("v"), value);
  ASSERT_EQ(reader->entries().size(), 3000u);
  EXPECT_EQ(reader->entries()[2999].name, "layer2999.\x02weight");
}

TEST(SafetensorsTest, ReadEntriesCopiesChosenEntriesAndSeesEveryByte) {
  const std::vector<float> a = {1, 2, 3}, b = {4, 5};
  const std::string path = TempPath("entries.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"a", {3}, a.data()}, {"b", {2}, b.data()}}, {}).ok());
  auto reader = SafetensorsReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<float> got_b(2);
  std::vector<char*> dest = {nullptr, reinterpret_cast<char*>(got_b.data())};
  std::string seen;
  ASSERT_TRUE(reader->ReadEntries(dest, [&](const char* p, size_t n) { seen.append(p, n); }).ok());
  EXPECT_EQ(got_b, b);
  ASSERT_EQ(seen.size(), 20u);
  EXPECT_EQ(std::memcmp(seen.data(), a.data(), 12), 0);
  const absl::Status s = reader->ReadEntries({dest[1]}, [](const char*, size_t) {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("1 destinations for 2 entries"), std::string::npos) << s;
}

// Opening a FIFO for reading would wait for a writer; the reader refuses it
// at once instead.
TEST(SafetensorsTest, FifoIsRefusedWithoutBlocking) {
  const std::string p = TempPath("fifo.safetensors");
  ::unlink(p.c_str());
  ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
  auto result = std::async(std::launch::async, [&] { return ReadSafetensors(p).status(); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Blocked in open(): a writer lets it go on, so that the test can end.
    const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "ReadSafetensors blocked opening a FIFO";
  }
  const absl::Status s = result.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(p + ": not a regular file"), std::string::npos) << s;
  ::unlink(p.c_str());
}

// Every truncation and every single-byte change of a valid file gives a
// Status or a valid reader, never a crash.
TEST(SafetensorsTest, MangledFilesNeverCrash) {
  const std::string good = TempPath("good.safetensors"), p = TempPath("mangled.safetensors");
  const std::vector<float> v = {1, 2, 3};
  ASSERT_TRUE(WriteSafetensorsFile(good, {{"w", {3}, v.data()}}, {{"m", "\\u00e9"}}).ok());
  std::ifstream in(good, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  for (size_t n = 0; n < bytes.size(); ++n) {
    WriteBytes(p, bytes.substr(0, n));
    EXPECT_FALSE(ReadSafetensors(p).ok()) << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit : {0, 5, 7}) {
      std::string m = bytes;
      m[i] ^= static_cast<char>(1 << bit);
      WriteBytes(p, m);
      ReadSafetensors(p).status().IgnoreError();
    }
  }
}

}  // namespace
}  // namespace psync
