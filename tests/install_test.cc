// //deploy:install: the binaries installed side by side run a job, with
// the daemons found beside the launcher; a bad PREFIX fails by name; a
// launcher without its daemons names every place it looked. Every run is
// bounded by RunToEnd's deadline.
#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

const std::vector<std::string> kInstalled = {"psync_server", "psync_worker", "psync_launch",
                                             "psync_ctl",    "psync_ckpt",   "psync_bench"};

// `argv` as from a user's shell: without this test's runfiles, so that an
// installed binary can find nothing but what the install put beside it.
std::vector<std::string> OutsideBazel(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/env", "-u", "TEST_SRCDIR", "-u", "RUNFILES_DIR",
                             "-u", "RUNFILES_MANIFEST_FILE"});
  return argv;
}

std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

TEST(InstallTest, InstalledLauncherRunsAJobWithTheDaemonsBesideIt) {
  const std::string prefix = FreshDir("install") + "/prefix";
  const Ended installed = RunToEnd({Runfile("deploy/install"), prefix});
  ASSERT_EQ(installed.exit_code, 0) << installed.output;
  const std::set<std::string> files = FilesIn(prefix + "/bin");
  for (const std::string& name : kInstalled) {
    const std::string path = prefix + "/bin/" + name;
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0) << path << " missing; " << installed.output;
    EXPECT_TRUE(st.st_mode & S_IXUSR) << path;
  }

  // Again over the same prefix: the same files, no leftovers.
  const Ended again = RunToEnd({Runfile("deploy/install"), prefix});
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(FilesIn(prefix + "/bin"), files);

  const Ended job = RunToEnd(OutsideBazel(
      {prefix + "/bin/psync_launch", "--num_servers=1", "--num_workers=1", "--devices=1",
       "--steps=5", "--synthetic_samples=64", "--timeout_s=25"}));
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_TRUE(Contains(job.output, "worker 0 finished 5 steps")) << job.output;
}

TEST(InstallTest, BadPrefixFailsByName) {
  const std::string dir = FreshDir("bad_prefix");
  WriteFile(dir + "/a_file", "x");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{dir + "/a_file"}, "PREFIX '" + dir + "/a_file' exists and is not a directory"},
      {{""}, "PREFIX is empty"},
      {{}, "expected one argument, the install prefix PREFIX"},
      {{dir + "/one", dir + "/two"}, "got 2"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {Runfile("deploy/install")};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(c.says);
    const Ended run = RunToEnd(argv);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(Contains(run.output, c.says)) << run.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/one"));
}

TEST(InstallTest, LauncherWithoutItsDaemonsNamesEveryPlaceLookedAt) {
  const std::string dir = FreshDir("alone");
  const std::string launcher = dir + "/psync_launch";
  std::filesystem::copy_file(Runfile("deploy/local/psync_launch"), launcher);
  const Ended run = RunToEnd(OutsideBazel(
      {launcher, "--num_servers=1", "--num_workers=1", "--synthetic_samples=64", "--steps=1",
       "--timeout_s=25"}));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output, "cannot find psync_server; looked at")) << run.output;
  for (const std::string& place :
       {dir + "/psync_server", dir + "/psync_launch.runfiles/psync/server/psync_server"}) {
    EXPECT_TRUE(Contains(run.output, place)) << place << "\n" << run.output;
  }
  EXPECT_TRUE(Contains(run.output, "//deploy:install")) << run.output;
}

}  // namespace
}  // namespace psync
