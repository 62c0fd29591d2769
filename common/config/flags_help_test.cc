#include "common/config/flags_help.h"

#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, zz_port, 7, "Port help.");
ABSL_FLAG(std::string, aa_name, "x", "Name help.");

namespace psync {
namespace {

bool HelpRequested(std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return PrintHelpIfRequested(static_cast<int>(args.size()), const_cast<char**>(args.data()),
                              __FILE__);
}

TEST(FlagsHelpTest, ListsThisFilesFlagsSortedWithTypeDefaultAndHelp) {
  absl::SetProgramUsageMessage("usage of prog");
  const std::string help = FlagsHelp(__FILE__);
  EXPECT_EQ(help.find("usage of prog"), 0u) << help;
  const size_t name = help.find("--aa_name (string, default: \"x\")\n      Name help.\n");
  const size_t port = help.find("--zz_port (int32, default: 7)\n      Port help.\n");
  ASSERT_NE(name, std::string::npos) << help;
  ASSERT_NE(port, std::string::npos) << help;
  EXPECT_LT(name, port);
}

TEST(FlagsHelpTest, OmitsFlagsOfOtherFiles) {
  EXPECT_EQ(FlagsHelp("other/main.cc", {}).find("--"), std::string::npos);
}

// This test links the job flags (common/config/job_flags.cc): all are listed after
// the program's own, or only those named.
TEST(FlagsHelpTest, ListsAllJobFlagsOrOnlyThoseNamed) {
  const std::string all = FlagsHelp(__FILE__);
  for (const char* flag : {"--config", "--servers", "--lr", "--batch_per_device"}) {
    EXPECT_TRUE(all.find(std::string("\n  ") + flag + " (") != std::string::npos) << flag << all;
  }
  const std::string some = FlagsHelp(__FILE__, {"config", "servers"});
  EXPECT_NE(some.find("\n  --aa_name ("), std::string::npos) << some;
  EXPECT_NE(some.find("\n  --config ("), std::string::npos) << some;
  EXPECT_NE(some.find("\n  --servers ("), std::string::npos) << some;
  EXPECT_EQ(some.find("--lr ("), std::string::npos) << some;
  EXPECT_EQ(some.find("--batch_per_device ("), std::string::npos) << some;
  const std::string none = FlagsHelp(__FILE__, {});
  EXPECT_EQ(none.find("Job configuration"), std::string::npos) << none;
  EXPECT_EQ(none.find("--config ("), std::string::npos) << none;
}

TEST(FlagsHelpTest, RecognizesHelpFlagsOnly) {
  EXPECT_TRUE(HelpRequested({"--help"}));
  EXPECT_TRUE(HelpRequested({"--zz_port=1", "-h"}));
  EXPECT_TRUE(HelpRequested({"-help"}));
  EXPECT_TRUE(HelpRequested({"--helpfull"}));
  EXPECT_FALSE(HelpRequested({}));
  EXPECT_FALSE(HelpRequested({"--zz_port=1", "help"}));
  EXPECT_FALSE(HelpRequested({"--helpx"}));
  EXPECT_FALSE(HelpRequested({"--", "--help"}));
}

}  // namespace
}  // namespace psync
