#include "common/config/job_flags.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, config);

namespace psync {
namespace {

TEST(JobFlagsTest, EveryFieldHasAFlagOfItsNameWithItsDefault) {
  const auto* d = proto::JobConfig::descriptor();
  std::set<std::string> names;
  for (int s = 0; s < d->field_count(); ++s) {
    const auto* section = d->field(s)->message_type();
    for (int f = 0; f < section->field_count(); ++f) {
      const auto* field = section->field(f);
      SCOPED_TRACE(field->full_name());
      EXPECT_TRUE(names.insert(field->name()).second) << "two fields named " << field->name();
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(field->name());
      ASSERT_NE(flag, nullptr);
      // The flag's default, set as a flag would, equals the field's default.
      LoadedJobConfig set;
      ASSERT_TRUE(SetJobConfigField(field->name(), flag->DefaultValue(), "test", &set).ok());
      proto::JobConfig defaults;
      defaults.GetReflection()->MutableMessage(&defaults, d->field(s));  // present, all defaults
      std::string a, b;
      google::protobuf::TextFormat::PrintFieldValueToString(
          set.config.GetReflection()->GetMessage(set.config, d->field(s)), field, -1, &a);
      google::protobuf::TextFormat::PrintFieldValueToString(
          defaults.GetReflection()->GetMessage(defaults, d->field(s)), field, -1, &b);
      EXPECT_EQ(a, b);
    }
  }
}

TEST(JobFlagsTest, FlagsOverrideTheConfigFile) {
  absl::FlagSaver restore_flags;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/job_flags_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/job.pbtxt";
  std::ofstream(path) << "cluster { num_workers: 3 }\noptimizer { lr: 0.5 momentum: 0.5 }\n";
  const std::string config_flag = "--config=" + path;
  std::vector<char*> argv = {const_cast<char*>("job_flags_test"),
                             const_cast<char*>(config_flag.c_str()),
                             const_cast<char*>("--lr=0.25")};
  absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  absl::StatusOr<LoadedJobConfig> loaded = LoadJobConfig();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.cluster().num_workers(), 3);
  EXPECT_EQ(loaded->config.optimizer().lr(), 0.25);
  EXPECT_EQ(loaded->config.optimizer().momentum(), 0.5);
  EXPECT_EQ(loaded->sources["lr"], "--lr");
  EXPECT_EQ(loaded->sources["momentum"], path + ":2");

  std::ofstream(path) << "cluster { num_workers: 3 }\ntraining { batch_per_device: 0 }\n";
  EXPECT_EQ(LoadJobConfig().status().message(),
            path + ":2: training.batch_per_device is 0, expected 1..1048576");
  absl::SetFlag(&FLAGS_config, dir);
  EXPECT_EQ(LoadJobConfig().status().message(),
            "job configuration " + dir + " is a directory, expected a regular file");
}

}  // namespace
}  // namespace psync
