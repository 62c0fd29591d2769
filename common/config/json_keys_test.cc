#include "common/config/json_keys.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

std::string ErrorOf(const std::string& text) {
  auto lines = JsonKeyLines("f.json", text);
  return lines.ok() ? "ok" : std::string(lines.status().message());
}

TEST(JsonKeyLinesTest, KeysAreFoundByPathWithTheirLines) {
  auto lines = JsonKeyLines("f.json", R"({
  "cluster": {"num_workers": 2,
    "servers": ["a:1", "b:2"]},
  "optimizer": {
    "lrSchedule": "cosine", "list": [{"x": 1}, {"x": 2}],
    "empty": {}, "nums": [-0.5e+3, 0, 12, true, false, null, "\"\\\/\b\f\n\r\t\u00e9"]
  }
})");
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(lines->at("cluster"), 2);
  EXPECT_EQ(lines->at("cluster.numWorkers"), 2);
  EXPECT_EQ(lines->at("cluster.servers"), 3);
  EXPECT_EQ(lines->at("optimizer.lrSchedule"), 5);
  EXPECT_EQ(lines->at("optimizer.nums"), 6);
  // Two levels only: a section and its fields.
  EXPECT_FALSE(lines->contains("optimizer.empty.x"));
  EXPECT_EQ(lines->size(), 8u);
  EXPECT_EQ(JsonFieldKey("lr_schedule"), "lrSchedule");
  EXPECT_EQ(JsonFieldKey("lrSchedule"), "lrSchedule");
  EXPECT_NE(JsonFieldKey("LR"), JsonFieldKey("lr"));  // protobuf keeps case
}

TEST(JsonKeyLinesTest, EscapedKeysAreComparedDecoded) {
  EXPECT_EQ(ErrorOf(R"({"lr": 1, "l\u0072": 2})"),
            "f.json:1:11: the key \"lr\" appears twice in one object (first on line 1); give "
            "each field once");
  // A surrogate pair is one character: U+1F600 written raw and escaped.
  EXPECT_TRUE(absl::StrContains(ErrorOf("{\"\xF0\x9F\x98\x80\": 1, \"\\ud83d\\ude00\": 2}"),
                                "appears twice"));
  EXPECT_EQ(ErrorOf(R"({"\ud83d": 1, "\ude00": 2, "\ud83d\u0041": 3})"), "ok");
  auto lines = JsonKeyLines("f.json", "{\"\\u006fptimizer\": {\n\"lr\": 1}}");
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(lines->at("optimizer.lr"), 2);
}

TEST(JsonKeyLinesTest, TextMustBeUtf8) {
  EXPECT_EQ(ErrorOf("{\"a\": \"caf\xC3\xA9 \xE2\x82\xAC \xF4\x8F\xBF\xBF\"}"), "ok");
  for (const char* bad : {"\xFF", "\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xE2\x82"}) {
    SCOPED_TRACE(absl::CHexEscape(bad));
    EXPECT_EQ(ErrorOf(absl::StrCat("{\"a\": \"x", bad, "\"}")),
              "f.json:1:9: a string that is not UTF-8 (JSON text is UTF-8)");
  }
}

TEST(JsonKeyLinesTest, LongKeysStayLinear) {
  // 50,000 children of one long key: recording whole paths of a 0.5 MB key
  // would take 25 GB. Keys no field could have are not recorded.
  for (const size_t length : {size_t{256}, size_t{500000}}) {
    SCOPED_TRACE(length);
    std::string text = absl::StrCat("{\"", std::string(length, 'p'), "\": {");
    for (int i = 0; i < 50000; ++i) {
      absl::StrAppend(&text, i ? "," : "", "\"k", i, "\": {\"x\": 0}");
    }
    text += "}}";
    auto lines = JsonKeyLines("f.json", text);
    ASSERT_TRUE(lines.ok()) << lines.status();
    EXPECT_EQ(lines->size(), length == 256 ? 50001u : 0u);
  }
}

TEST(JsonKeyLinesTest, ARepeatedKeyIsRefusedWhereItRepeats) {
  EXPECT_EQ(ErrorOf("{\"a\": {\"lr\": 1,\n \"lr\": 2}}"),
            "f.json:2:2: the key \"lr\" appears twice in one object (first on line 1); give "
            "each field once");
  EXPECT_EQ(ErrorOf(R"({"a": {"warmup_steps": 1, "warmupSteps": 2}})"),
            "f.json:1:27: the keys \"warmup_steps\" (line 1) and \"warmupSteps\" name the same "
            "field; give each field once");
  // Keys in messages are escaped and cut short.
  EXPECT_TRUE(absl::StrContains(ErrorOf("{\"a\\\"b\": 1, \"a\\\"b\": 2}"),
                                R"(the key "a\"b" appears twice)"));
  const std::string long_key(100, 'k');
  EXPECT_TRUE(absl::StrContains(
      ErrorOf(absl::StrCat("{\"", long_key, "\": 1, \"", long_key, "\": 2}")),
      absl::StrCat("\"", std::string(64, 'k'), "...\" (100 bytes) appears twice")));
  // Equal keys in different objects are not repeats.
  EXPECT_EQ(ErrorOf(R"({"a": {"lr": 1}, "b": {"lr": 2}, "c": [{"x": 1}, {"x": 2}]})"), "ok");
}

TEST(JsonKeyLinesTest, SyntaxErrorsNameLineAndColumn) {
  const struct {
    const char* text;
    const char* error;
  } cases[] = {
      {"", "f.json:1:1: the document ends where a value was expected"},
      {"\xEF\xBB\xBF{}", "f.json:1:1: the file starts with a UTF-8 byte order mark"},
      {"{\"a\": 1,\n}", "f.json:2:1: expected a key"},
      {"{\"a\" 1}", "f.json:1:6: expected ':' after a key"},
      {"{\"a\": 1 \"b\": 2}", "f.json:1:9: expected ',' or '}'"},
      {"[1 2]", "f.json:1:4: expected ',' or ']'"},
      {"{\"a\": abc}", "f.json:1:7: expected a value"},
      {"{\"a\": 01}", "f.json:1:8: not a number"},
      {"{\"a\": 0x10}", "f.json:1:8: not a number"},
      {"{\"a\": 1.}", "f.json:1:9: expected digits after '.'"},
      {"{\"a\": 1e}", "f.json:1:9: expected digits in a number's exponent"},
      {"{\"a\": -}", "f.json:1:8: expected digits in a number"},
      {"{\"a\":\n  -1e400}", "f.json:2:3: the number -1e400 is out of the range of a double"},
      {"{\"a\": \"x\\q\"}", "f.json:1:10: an unknown escape"},
      {"{\"a\": \"\\u12g4\"}", "f.json:1:9: \\u must be followed by 4 hexadecimal digits"},
      {"{\"a\": \"x\ny\"}", "f.json:1:9: a line break in a string: is its closing quote missing?"},
      {"{\"a\": \"x\ty\"}", "f.json:1:9: a control character in a string"},
      {"{\"a\": \"abc", "f.json:1:7: this string has no closing quote"},
      {"{\"a\": 1} {}", "f.json:1:10: unexpected text after the document"},
      {"{\"a\": 1", "f.json:1:8: expected ',' or '}'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_TRUE(absl::StartsWith(ErrorOf(c.text), c.error)) << ErrorOf(c.text);
  }
}

TEST(JsonKeyLinesTest, NestingIsBounded) {
  std::string deep(64, '['), deeper(65, '[');
  deep += std::string(64, ']');
  deeper += std::string(65, ']');
  EXPECT_EQ(ErrorOf(deep), "ok");
  EXPECT_TRUE(absl::StrContains(ErrorOf(deeper), "nested deeper than 64")) << ErrorOf(deeper);
  // Deeper than any stack would take, refused without recursing that far.
  EXPECT_TRUE(absl::StrContains(ErrorOf(std::string(1 << 20, '[')), "nested deeper than 64"));
}

TEST(JsonKeyLinesTest, NumbersInADoublesRangePass) {
  for (const char* text : {"[1.7e308, -1.7e308, 1e-400, 0, -0.0]",
                           "[1000000000000000000000000000000000000000000000000000000000]"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(JsonKeyLines("f.json", text).ok());
  }
}

TEST(JsonKeyLinesTest, ManyKeysScanInLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&text, i ? ",\n" : "", "\"k", i, "\": ", i);
  text += "}";
  auto lines = JsonKeyLines("f.json", text);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(lines->at("k99999"), 100000);
}

}  // namespace
}  // namespace psync
