#include "common/config/enum_names.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

enum class Color { kRed, kGreen, kBlue };

constexpr EnumName<Color> kOne[] = {{Color::kRed, "red"}};
constexpr EnumName<Color> kTwo[] = {{Color::kRed, "red"}, {Color::kGreen, "green"}};
constexpr EnumName<Color> kThree[] = {
    {Color::kRed, "red"}, {Color::kGreen, "green"}, {Color::kBlue, "blue"}};

TEST(EnumNamesTest, JoinChoicesSaysOrBeforeTheLast) {
  EXPECT_EQ(JoinChoices({}), "");
  EXPECT_EQ(JoinChoices({"a"}), "a");
  EXPECT_EQ(JoinChoices({"a", "b"}), "a or b");
  EXPECT_EQ(JoinChoices({"a", "b", "c", "d"}), "a, b, c or d");
}

TEST(EnumNamesTest, ChoicesListTheTableInOrder) {
  EXPECT_EQ(EnumChoices(kOne), "red");
  EXPECT_EQ(EnumChoices(kTwo), "red or green");
  EXPECT_EQ(EnumChoices(kThree), "red, green or blue");
  EXPECT_EQ(EnumChoices(kOne, "a colour of your own"), "red or a colour of your own");
  EXPECT_EQ(EnumChoices(kTwo, "any other"), "red, green or any other");
}

TEST(EnumNamesTest, ParseFindsExactNamesAndListsTheChoicesOtherwise) {
  EXPECT_EQ(*ParseEnumName(kThree, "--color", "blue"), Color::kBlue);
  for (const char* bad : {"Blue", " blue", "", "purple"}) {
    const absl::StatusOr<Color> parsed = ParseEnumName(kThree, "--color", bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseEnumName(kThree, "--color", "purple").status().message(),
            "--color is 'purple', expected red, green or blue");
  EXPECT_EQ(FindEnumName(kTwo, "blue"), nullptr);
  ASSERT_NE(FindEnumName(kTwo, "green"), nullptr);
  EXPECT_EQ(*FindEnumName(kTwo, "green"), Color::kGreen);
}

TEST(EnumNamesTest, NameOfAValueTheTableLacksIsUnknown) {
  EXPECT_EQ(EnumNameOf(kThree, Color::kGreen), "green");
  EXPECT_EQ(EnumNameOf(kTwo, Color::kBlue), "unknown");
}

}  // namespace
}  // namespace psync
