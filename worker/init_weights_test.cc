#include "worker/init_weights.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/format/safetensors.h"
#include "common/model/init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two tensors: w [2, 3] and b [2], cut into chunks of 8 bytes on 2 servers.
Layout TwoTensors() { return *Layout::Create({{"w", {2, 3}}, {"b", {2}}}, 8, 2, 7); }

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string Write(const std::string& name, const std::vector<SafetensorsEntry>& entries) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteSafetensorsFile(path, entries, {}).ok());
  return path;
}

const std::vector<float> kW = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {-1, -2};

TEST(InitWeightsTest, AFileWithTheModelsTensorsGivesTheFlatVectorInLayoutOrder) {
  // The file's order (b first) need not be the model's.
  const std::string path = Write("ok.safetensors", {{"b", {2}, kB.data()}, {"w", {2, 3}, kW.data()}});
  absl::StatusOr<std::vector<float>> flat = ReadInitWeights(path, TwoTensors());
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(*flat, ElementsAre(1, 2, 3, 4, 5, 6, -1, -2));
}

TEST(InitWeightsTest, AMissingTensorIsNamed) {
  const std::string path = Write("missing.safetensors", {{"w", {2, 3}, kW.data()}});
  absl::StatusOr<std::vector<float>> flat = ReadInitWeights(path, TwoTensors());
  EXPECT_EQ(flat.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flat.status().message(),
            "--init_weights " + path + ": tensor 'b' [2] of the model is missing from the file");
}

TEST(InitWeightsTest, AnExtraTensorIsNamed) {
  const std::vector<float> x = {0};
  const std::string path = Write(
      "extra.safetensors", {{"w", {2, 3}, kW.data()}, {"b", {2}, kB.data()}, {"x", {1}, x.data()}});
  EXPECT_THAT(ReadInitWeights(path, TwoTensors()).status().message(),
              HasSubstr("tensor 'x' [1] is not in the model, which has 2 tensors"));
}

TEST(InitWeightsTest, AnotherShapeIsNamedWithTheModels) {
  const std::string path =
      Write("shape.safetensors", {{"w", {3, 2}, kW.data()}, {"b", {2}, kB.data()}});
  EXPECT_THAT(ReadInitWeights(path, TwoTensors()).status().message(),
              HasSubstr("tensor 'w' has shape [3, 2], the model's is [2, 3]"));
}

TEST(InitWeightsTest, AValueThatIsNotFiniteIsNamed) {
  std::vector<float> w = kW;
  w[4] = INFINITY;
  const std::string path = Write("inf.safetensors", {{"w", {2, 3}, w.data()}, {"b", {2}, kB.data()}});
  EXPECT_THAT(ReadInitWeights(path, TwoTensors()).status().message(),
              HasSubstr("value 4 of tensor 'w' is inf, expected a finite value"));
}

TEST(InitWeightsTest, AnotherDtypeOrAMissingFileIsRefusedByName) {
  // A header of one F16 tensor 'b' [2], then its 4 bytes.
  const std::string header =
      R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  const std::string path = TempPath("f16.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(4, '\0');
  }
  absl::StatusOr<std::vector<float>> flat = ReadInitWeights(path, TwoTensors());
  EXPECT_FALSE(flat.ok());
  EXPECT_THAT(std::string(flat.status().message()),
              AllOf(HasSubstr("--init_weights: " + path + ": "),
                    HasSubstr("tensor 'b' has dtype 'F16', expected F32")));
  EXPECT_THAT(
      std::string(ReadInitWeights(TempPath("none.safetensors"), TwoTensors()).status().message()),
      HasSubstr("--init_weights: "));
}

TEST(InitWeightsTest, SeedWeightsAreWhatServersComputeFromTheSeed) {
  const Layout layout = TwoTensors();
  const std::vector<float> flat = SeedInitWeights(layout);
  ASSERT_EQ(flat.size(), 8u);
  std::vector<float> w(6);
  InitialValues(7, layout.tensors()[0], 0, 6, w.data());
  EXPECT_EQ(std::vector<float>(flat.begin(), flat.begin() + 6), w);
  EXPECT_THAT(std::vector<float>(flat.begin() + 6, flat.end()), ElementsAre(0, 0));  // biases
}

}  // namespace
}  // namespace psync
