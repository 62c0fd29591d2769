#include "common/monitoring/logging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMicros = int64_t{1795443320} * 1000000 + 123456;  // 2026-11-23 ...

TEST(LoggingTest, TextLinesNameTheRoleAndRank) {
  EXPECT_EQ(FormatLogLine(LogFormat::kText, 'I', "server", 1, kMicros, "main.cc", 150,
                          "listening"),
            "I1123 14:15:20.123456 server 1 main.cc:150] listening");
  EXPECT_EQ(FormatLogLine(LogFormat::kText, 'E', "worker", -1, kMicros, "main.cc", 7,
                          "bad\nflag"),
            "E1123 14:15:20.123456 worker ? main.cc:7] bad | flag");
}

TEST(LoggingTest, JsonLinesAreOneObjectWithEscapes) {
  EXPECT_EQ(FormatLogLine(LogFormat::kJson, 'W', "worker", 3, kMicros, "trainer.cc", 42,
                          "a \"quoted\" \\ path\nnext\x01"),
            "{\"time\":\"2026-11-23T14:15:20.123456Z\",\"level\":\"WARNING\",\"role\":\"worker\","
            "\"rank\":3,\"file\":\"trainer.cc\",\"line\":42,"
            "\"msg\":\"a \\\"quoted\\\" \\\\ path\\nnext\\u0001\"}");
  // Before the rank is known; bytes that are not UTF-8 become U+FFFD.
  EXPECT_EQ(FormatLogLine(LogFormat::kJson, 'E', "server", -1, kMicros, "m.cc", 1,
                          "caf\xC3\xA9 \xFF"),
            "{\"time\":\"2026-11-23T14:15:20.123456Z\",\"level\":\"ERROR\",\"role\":\"server\","
            "\"rank\":null,\"file\":\"m.cc\",\"line\":1,\"msg\":\"caf\xC3\xA9 \xEF\xBF\xBD\"}");
}

TEST(LoggingTest, IllFormedUtf8BecomesReplacementCharacters) {
  auto msg = [](const std::string& m) {
    const std::string line = FormatLogLine(LogFormat::kJson, 'I', "w", 0, kMicros, "f", 1, m);
    return line.substr(line.find("\"msg\":\"") + 7);
  };
  EXPECT_EQ(msg("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD\"}");           // overlong '/'
  EXPECT_EQ(msg("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"}");  // a surrogate
  EXPECT_EQ(msg("\xF4\x90\x80\x80").substr(0, 3), "\xEF\xBF\xBD");     // past U+10FFFF
  EXPECT_EQ(msg("\xE2\x82\xAC \xF0\x9F\x98\x80"), "\xE2\x82\xAC \xF0\x9F\x98\x80\"}");  // kept
}

TEST(LoggingTest, ParseLogFormat) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  auto bad = ParseLogFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--log_format is 'xml', expected text or json");
}

TEST(LoggingTest, LogGoesThroughTheSinkToStderrOnly) {
  const std::string path = ::testing::TempDir() + "/stderr.txt";
  fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  dup2(fd, STDERR_FILENO);
  InitLogging("logging_test", "server");
  LOG(INFO) << "before the rank";
  SetLogRank(2);
  SetLogFormat(LogFormat::kJson);
  LOG(WARNING) << "as json";
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(fd);
  close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string out = text.str();
  EXPECT_THAT(out, HasSubstr(" server ? logging_test.cc:"));
  EXPECT_THAT(out, HasSubstr("] before the rank\n"));
  EXPECT_THAT(out, HasSubstr("\"level\":\"WARNING\",\"role\":\"server\",\"rank\":2,"
                             "\"file\":\"logging_test.cc\""));
  EXPECT_THAT(out, HasSubstr("\"msg\":\"as json\"}\n"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;  // each line once
}

}  // namespace
}  // namespace psync
