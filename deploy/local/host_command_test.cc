#include "deploy/local/host_command.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

// Words a shell would otherwise split, expand or choke on.
const std::vector<std::string> kHardWords = {
    "plain", "two words", "it's", "\"double\"", "$HOME", "`id`", "a\\b", "", "*", "x;y",
    "line\nbreak", "'", "--flag=a b", "#x", "~", "{a,b}"};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs argv to its end, its input open (the wrapper stops its process at
// the input's end); returns its output, with its exit code in *code.
std::string RunToEnd(const std::vector<std::string>& argv, int* code) {
  auto p = Subprocess::Start(argv, "", /*echo=*/false, 0, /*control_stdin=*/true);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return "";
  *code = (*p)->Wait(absl::Now() + absl::Seconds(20)).value_or(-1);
  return (*p)->DrainedOutput(absl::Now() + absl::Seconds(10));
}

// A stand-in for ssh that does what ssh does with its arguments: drops the
// host, joins the rest with spaces, and gives that to a shell "there".
std::string FakeSsh() {
  const std::string path = ::testing::TempDir() + "/fake_ssh";
  std::ofstream(path) << "#!/bin/sh\nshift\nexec /bin/sh -c \"$*\"\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// One line per argument, each between < and >.
const std::vector<std::string> kPrintArgs = {"/bin/sh", "-c", "printf '<%s>\\n' \"$@\"", "print"};

std::string Expected(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) absl::StrAppend(&text, "<", w, ">\n");
  return text;
}

TEST(HostCommandTest, PlainWordsStayAndOthersAreSingleQuoted) {
  EXPECT_EQ(ShellQuote("--worker_rank=2"), "--worker_rank=2");
  EXPECT_EQ(ShellQuote("/a/b.pbtxt"), "/a/b.pbtxt");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("A_1=x"), "'A_1=x'") << "an assignment as a first word";
  EXPECT_EQ(ShellQuote("1A=x"), "1A=x");
  EXPECT_EQ(ShellCommandLine({"echo", "a b", "$x"}), "echo 'a b' '$x'");
}

TEST(HostCommandTest, AShellSplitsTheCommandLineBackIntoTheWords) {
  std::vector<std::string> words = kPrintArgs;
  words.insert(words.end(), kHardWords.begin(), kHardWords.end());
  int code = -1;
  EXPECT_EQ(RunToEnd({"/bin/sh", "-c", ShellCommandLine(words)}, &code), Expected(kHardWords));
  EXPECT_EQ(code, 0);
}

TEST(HostCommandTest, TheWordsSurviveAnSshStyleTemplateAndALocalOne) {
  std::vector<std::string> words = kPrintArgs;
  words.insert(words.end(), kHardWords.begin(), kHardWords.end());
  const std::string line = ShellCommandLine(words);
  for (const std::string& host_cmd : {FakeSsh() + " {host}", std::string("env H={host} sh -c")}) {
    const std::vector<std::string> argv = HostCommandArgv(host_cmd, "me@node-1", line);
    ASSERT_EQ(argv.size(), 3u);
    EXPECT_THAT(argv[2], HasSubstr("me@node-1"));
    int code = -1;
    EXPECT_EQ(RunToEnd(argv, &code), Expected(kHardWords)) << host_cmd;
    EXPECT_EQ(code, 0);
  }
}

TEST(HostCommandTest, TemplatesNeedHostAndNoOtherPlaceholder) {
  EXPECT_TRUE(ValidateHostCommand(kDefaultHostCommand).ok());
  EXPECT_TRUE(ValidateHostCommand("ip netns exec {host} sh -c").ok());
  EXPECT_TRUE(ValidateHostCommand("ssh -p 2222 {host}").ok());
  EXPECT_TRUE(ValidateHostCommand("  ip netns exec {host} bash -c").ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "--host_cmd is '' without {host}"},
      {"ssh node1", "--host_cmd is 'ssh node1' without {host}"},
      {"ssh {host} {cmd}", "its only placeholder is {host}, found '{cmd}'"},
      {"ip netns exec {host}",
       "ip runs its last argument as a program, not as a shell command line as ssh does; end "
       "the template with a shell, e.g. 'ip netns exec {host} sh -c'"},
      {"docker exec -i {host}", "e.g. 'docker exec -i {host} sh -c'"},
      {"docker exec {host} sh -c",
       "docker exec passes its standard input on only with -i, and each process's wrapper reads "
       "its orders there (its end stops the process at once); add -i, e.g. 'docker exec -i "
       "{host} sh -c'"},
      {"kubectl exec {host} -- sh -c", "kubectl exec passes its standard input on only with -i"},
  };
  EXPECT_TRUE(ValidateHostCommand("docker exec -i {host} sh -c").ok());
  EXPECT_TRUE(ValidateHostCommand("kubectl exec -it {host} -- sh -c").ok());
  for (const auto& [value, message] : cases) {
    const absl::Status s = ValidateHostCommand(value);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << value;
    EXPECT_THAT(s.message(), HasSubstr(message)) << value;
  }
}

// The wrapper through the ssh stand-in: the job file arrives with its
// bytes, the pid file holds the process's pid, the process runs in the
// given directory, and its exit code comes back.
TEST(HostCommandTest, TheWrapperRunsTheProcessWithItsJobFile) {
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "wrapper_run").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  HostProcess process;
  process.argv = {"/bin/sh", "-c",
                  "echo pid $$; pwd; cat \"${2#--config=}\"; printf '<%s>\\n' \"$1\"; exit 5",
                  "proc", "a 'b' $c"};
  process.job_config = "cluster { servers: \"h0:1,h1:2\" }\n# it's \"quoted\"\n";
  process.pid_file = dir + "/pids/worker-0.pid";
  process.cwd = dir;
  int code = -1;
  const std::string out =
      RunToEnd(HostCommandArgv(FakeSsh() + " {host}", "h", HostProcessCommandLine(process)), &code);
  EXPECT_EQ(code, 5);
  const std::string pid = Slurp(process.pid_file);
  EXPECT_EQ(out, absl::StrCat("pid ", pid, dir, "\n", process.job_config, "<a 'b' $c>\n"));
}

// The launcher's way to stop a process there: a line naming the signal;
// and if the launcher (or its ssh) goes, the end of the input stops it.
TEST(HostCommandTest, TheWrapperSignalsTheProcessAsItsInputSays) {
  HostProcess process;
  process.argv = {"/bin/sh", "-c",
                  "trap 'echo term; exit 9' TERM; echo ready; while :; do sleep 0.05; done"};
  process.cwd = "/";
  for (const bool close_input : {false, true}) {
    auto p = Subprocess::Start(
        HostCommandArgv(FakeSsh() + " {host}", "h", HostProcessCommandLine(process)), "",
        /*echo=*/false, 0, /*control_stdin=*/true);
    ASSERT_TRUE(p.ok()) << p.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while ((*p)->output().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ((*p)->output(), "ready\n") << "the trap is set";
    if (close_input) {
      (*p)->CloseInput();
    } else {
      EXPECT_TRUE((*p)->WriteInput("TERM\n"));
    }
    EXPECT_EQ((*p)->Wait(absl::Now() + absl::Seconds(20)), 9) << close_input;
    EXPECT_EQ((*p)->DrainedOutput(absl::Now() + absl::Seconds(10)), "ready\nterm\n");
  }
}

TEST(HostCommandTest, AProcessKilledThereReportsTheSignalsCode) {
  HostProcess process;
  process.argv = {"/bin/sh", "-c", "kill -9 $$"};
  process.cwd = "/";
  int code = -1;
  RunToEnd(HostCommandArgv("env H={host} sh -c", "h", HostProcessCommandLine(process)), &code);
  EXPECT_EQ(code, 128 + 9);
}

}  // namespace
}  // namespace psync
