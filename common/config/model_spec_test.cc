#include "common/config/model_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ModelSpecTest, DefaultsAndSizes) {
  EXPECT_EQ(ParseModelSpec("mlp")->Describe(), "mlp:784-256-128-10");
  EXPECT_EQ(ParseModelSpec("cnn")->Describe(), "cnn:16-32-128");
  EXPECT_EQ(ParseModelSpec("mlp:784-512-512-10")->widths,
            (std::vector<int64_t>{784, 512, 512, 10}));
  EXPECT_EQ(ParseModelSpec("mlp:784-10")->widths.size(), 2u);  // logistic regression
  EXPECT_EQ(ParseModelSpec("cnn:8-16-64")->widths, (std::vector<int64_t>{8, 16, 64}));
}

TEST(ModelSpecTest, MalformedSpecsNameTheValue) {
  auto error = [](const std::string& s) { return std::string(ParseModelSpec(s).status().message()); };
  EXPECT_EQ(error("mlp:784-0-10"),
            "--model is 'mlp:784-0-10', expected mlp, mlp:<input>-<hidden>...-<classes> (e.g. "
            "mlp:784-512-512-10), cnn or cnn:<conv1 channels>-<conv2 channels>-<hidden> (e.g. "
            "cnn:16-32-128) (width 0 is out of range 1..1048576)");
  EXPECT_THAT(error("mlp:abc"), HasSubstr("('abc' is not a number)"));
  EXPECT_THAT(error("mlp:784"), HasSubstr("at least the input and class widths"));
  EXPECT_THAT(error("mlp:784--10"), HasSubstr("'' is not a number"));
  EXPECT_THAT(error("resnet"), StartsWith("--model is 'resnet', expected mlp"));
  EXPECT_THAT(error("resnet"), HasSubstr("(unknown model)"));
  EXPECT_THAT(error("cnn:16-32"), HasSubstr("exactly three numbers"));
  EXPECT_THAT(error("cnn:16-99999-128"), HasSubstr("out of range 1..4096"));
  EXPECT_THAT(error(""), HasSubstr("unknown model"));
  // Widths each in range, but 2^40 weights in all.
  EXPECT_THAT(error("mlp:1048576-1048576-10"),
              HasSubstr("(it has 1099523162122 parameters, at most 1073741824 fit)"));
  // Layers each small, but more tensors than a layout holds.
  std::string deep = "mlp:784";
  for (int i = 0; i < 32768; ++i) deep += "-1";
  EXPECT_TRUE(ParseModelSpec(deep).ok());  // 32768 layers: 65536 tensors
  EXPECT_THAT(error(deep + "-10"), HasSubstr("(it has 32769 layers, at most 32768 fit)"));
  EXPECT_EQ(ParseModelSpec("mlp")->ParameterCount(), 235146);
  EXPECT_EQ(ParseModelSpec("cnn")->ParameterCount(), 215370);
}

}  // namespace
}  // namespace psync
