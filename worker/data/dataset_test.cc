#include "worker/data/dataset.h"

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

constexpr char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void AppendBe32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(v >> shift);
}

std::vector<uint8_t> ImagesIdx(uint32_t n, uint32_t rows, uint32_t cols,
                               const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  AppendBe32(out, 0x803);
  AppendBe32(out, n);
  AppendBe32(out, rows);
  AppendBe32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<uint8_t> LabelsIdx(uint32_t n, const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  AppendBe32(out, 0x801);
  AppendBe32(out, n);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

std::string WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TmpPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    EXPECT_EQ(gzwrite(f, bytes.data(), bytes.size()),
              static_cast<int>(bytes.size()));
  }
  gzclose(f);
  return path;
}

std::string WriteRaw(const std::string& name, const std::string& bytes) {
  const std::string path = TmpPath(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

// Two 2x3 images and their labels.
const std::vector<uint8_t> kPixels = {0, 255, 51, 102, 153, 204,
                                      1, 2,   3,  4,   5,   6};
const std::vector<uint8_t> kLabels = {3, 9};

TEST(ReadIdxGzTest, ReadsValidFiles) {
  const std::string images = WriteGz("ok-images.gz", ImagesIdx(2, 2, 3, kPixels));
  const std::string labels = WriteGz("ok-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->size, 2);
  EXPECT_EQ(ds->input_dim, 6);
  EXPECT_EQ(ds->num_classes, 10);
  EXPECT_EQ(ds->labels, kLabels);
  // Kept at their stored width, scaled as they are copied out.
  EXPECT_EQ(ds->pixels, kPixels);
  EXPECT_TRUE(ds->inputs.empty());
  std::vector<float> floats(12);
  ds->CopyInputs(0, 2, floats.data());
  for (size_t i = 0; i < kPixels.size(); ++i) {
    EXPECT_EQ(floats[i], static_cast<float>(kPixels[i]) / 255.0f);
  }
  EXPECT_EQ(floats[0], 0.0f);
  EXPECT_EQ(floats[1], 1.0f);
  std::vector<float> second(6);
  ds->CopyInputs(1, 1, second.data());
  EXPECT_EQ(second, std::vector<float>(floats.begin() + 6, floats.end()));
}

TEST(ReadIdxGzTest, MissingFileIsNotFound) {
  const std::string labels = WriteGz("nf-labels.gz", LabelsIdx(2, kLabels));
  const std::string missing = TmpPath("does-not-exist.gz");
  absl::StatusOr<Dataset> ds = ReadIdxGz(missing, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ds.status().message(), HasSubstr(missing));
}

TEST(ReadIdxGzTest, WrongMagicIsInvalidArgument) {
  // A labels file where the images file belongs.
  const std::string labels = WriteGz("wm-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(labels, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr("magic"));
  EXPECT_THAT(ds.status().message(), HasSubstr("0x00000801"));
  EXPECT_THAT(ds.status().message(), HasSubstr("0x00000803"));
}

TEST(ReadIdxGzTest, TruncatedDataIsDataLoss) {
  std::vector<uint8_t> bytes = ImagesIdx(2, 2, 3, kPixels);
  bytes.resize(bytes.size() - 5);
  const std::string images = WriteGz("tr-images.gz", bytes);
  const std::string labels = WriteGz("tr-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), HasSubstr(images));
  EXPECT_THAT(ds.status().message(), HasSubstr("expected 12 bytes"));
  EXPECT_THAT(ds.status().message(), HasSubstr("got 7"));
}

TEST(ReadIdxGzTest, TruncatedHeaderIsDataLoss) {
  std::vector<uint8_t> bytes = ImagesIdx(2, 2, 3, {});
  bytes.resize(9);
  const std::string images = WriteGz("th-images.gz", bytes);
  const std::string labels = WriteGz("th-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), HasSubstr("header"));
}

TEST(ReadIdxGzTest, TrailingBytesAreDataLoss) {
  std::vector<uint8_t> bytes = LabelsIdx(2, kLabels);
  bytes.push_back(7);
  const std::string images = WriteGz("tb-images.gz", ImagesIdx(2, 2, 3, kPixels));
  const std::string labels = WriteGz("tb-labels.gz", bytes);
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), HasSubstr(labels));
  EXPECT_THAT(ds.status().message(), HasSubstr("trailing"));
}

TEST(ReadIdxGzTest, CountMismatchIsInvalidArgument) {
  const std::string images = WriteGz("cm-images.gz", ImagesIdx(2, 2, 3, kPixels));
  const std::string labels = WriteGz("cm-labels.gz", LabelsIdx(1, {3}));
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr("2 images"));
  EXPECT_THAT(ds.status().message(), HasSubstr("1 labels"));
}

TEST(ReadIdxGzTest, LabelOutOfRangeIsInvalidArgument) {
  const std::string images = WriteGz("lr-images.gz", ImagesIdx(2, 2, 3, kPixels));
  const std::string labels = WriteGz("lr-labels.gz", LabelsIdx(2, {3, 10}));
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr("sample 1 has label 10"));
  // The same file is fine with more classes.
  EXPECT_TRUE(ReadIdxGz(images, labels, 11).ok());
}

TEST(ReadIdxGzTest, NonGzipGarbageIsInvalidArgument) {
  const std::string garbage =
      WriteRaw("garbage.gz", "this is not a gzip file, nor an IDX file\n");
  const std::string labels = WriteGz("gb-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(garbage, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr(garbage));
  EXPECT_THAT(ds.status().message(), HasSubstr("not gzip-compressed"));
}

TEST(ReadIdxGzTest, EmptyFileIsDataLoss) {
  const std::string empty = WriteRaw("empty.gz", "");
  const std::string labels = WriteGz("ef-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(empty, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), HasSubstr("got 0"));
}

TEST(ReadIdxGzTest, CorruptGzipStreamIsDataLoss) {
  // A valid gzip file with its compressed payload overwritten.
  const std::string good = WriteGz("cg-src.gz", ImagesIdx(2, 2, 3, kPixels));
  FILE* f = std::fopen(good.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string bytes;
  int c;
  while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<char>(c));
  std::fclose(f);
  ASSERT_GT(bytes.size(), 20u);
  for (size_t i = 10; i < bytes.size() - 8; ++i) bytes[i] = '\xff';
  const std::string bad = WriteRaw("cg-bad.gz", bytes);
  const std::string labels = WriteGz("cg-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(bad, labels);
  EXPECT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr(bad));
}

TEST(ReadIdxGzTest, OversizedDeclarationIsInvalidArgument) {
  const std::string images =
      WriteGz("os-images.gz", ImagesIdx(0xffffffffu, 28, 28, kPixels));
  const std::string labels = WriteGz("os-labels.gz", LabelsIdx(2, kLabels));
  absl::StatusOr<Dataset> ds = ReadIdxGz(images, labels);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr("more than 2147483648 bytes"));
}

TEST(ReadIdxGzTest, BadNumClassesIsInvalidArgument) {
  const std::string images = WriteGz("nc-images.gz", ImagesIdx(2, 2, 3, kPixels));
  const std::string labels = WriteGz("nc-labels.gz", LabelsIdx(2, kLabels));
  EXPECT_EQ(ReadIdxGz(images, labels, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadIdxGz(images, labels, 257).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoadFashionMnistTest, LoadsRealData) {
  FILE* probe = std::fopen(
      (std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz").c_str(), "rb");
  if (probe == nullptr) GTEST_SKIP() << kFashionDir << " is not installed";
  std::fclose(probe);
  for (bool train : {true, false}) {
    absl::StatusOr<Dataset> ds = LoadFashionMnist(kFashionDir, train);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds->size, train ? 60000 : 10000);
    EXPECT_EQ(ds->input_dim, 784);
    EXPECT_EQ(ds->num_classes, 10);
    EXPECT_EQ(ds->pixels.size(), static_cast<size_t>(ds->size) * 784);
    ASSERT_EQ(ds->labels.size(), static_cast<size_t>(ds->size));
    std::vector<int> per_class(10, 0);
    for (uint8_t l : ds->labels) {
      ASSERT_LT(l, 10);
      ++per_class[l];
    }
    for (int count : per_class) EXPECT_EQ(count, ds->size / 10);
    std::vector<float> last(784);
    ds->CopyInputs(ds->size - 1, 1, last.data());
    for (float v : last) {
      ASSERT_GE(v, 0.0f);
      ASSERT_LE(v, 1.0f);
    }
  }
}

TEST(LoadFashionMnistTest, MissingDirIsNotFound) {
  absl::StatusOr<Dataset> ds = LoadFashionMnist(TmpPath("no-such-dir"), true);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ds.status().message(), HasSubstr("train-images-idx3-ubyte.gz"));
}

TEST(SyntheticDatasetTest, DeterministicFromSeed) {
  const Dataset a = SyntheticDataset(200, 16, 4, 42);
  const Dataset b = SyntheticDataset(200, 16, 4, 42);
  const Dataset c = SyntheticDataset(200, 16, 4, 43);
  EXPECT_EQ(a.size, 200);
  EXPECT_EQ(a.input_dim, 16);
  EXPECT_EQ(a.num_classes, 4);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.inputs, c.inputs);
  EXPECT_NE(a.labels, c.labels);
}

TEST(SyntheticDatasetTest, InputsInUnitIntervalAndLabelsSpread) {
  const Dataset ds = SyntheticDataset(2000, 32, 10, 7);
  ASSERT_EQ(ds.inputs.size(), 2000u * 32);
  for (float v : ds.inputs) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
  }
  std::vector<int> per_class(10, 0);
  for (uint8_t l : ds.labels) {
    ASSERT_LT(l, 10);
    ++per_class[l];
  }
  // Every class occurs: the task is not trivially one label.
  for (int count : per_class) EXPECT_GT(count, 20);
}

TEST(SyntheticDatasetTest, BadArgumentsGiveEmptyDataset) {
  EXPECT_EQ(SyntheticDataset(-1, 4, 2, 1).size, 0);
  EXPECT_EQ(SyntheticDataset(10, 0, 2, 1).inputs.size(), 0u);
  EXPECT_EQ(SyntheticDataset(10, 4, 0, 1).labels.size(), 0u);
}

}  // namespace
}  // namespace psync
