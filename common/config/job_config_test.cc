#include "common/config/job_config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Parses, then finishes (fills in and validates) a text configuration.
absl::StatusOr<LoadedJobConfig> Load(const std::string& text, const std::string& name = "job.pbtxt") {
  LoadedJobConfig loaded;
  absl::Status s = ParseJobConfig(name, text, &loaded);
  if (s.ok()) s = FinishJobConfig(&loaded);
  if (!s.ok()) return s;
  return loaded;
}

TEST(JobConfigTest, DefaultsAreValid) {
  auto loaded = Load("");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.optimizer().lr(), 0.1);
  EXPECT_EQ(loaded->config.training().batch_per_device(), 32);
}

// The optimizer section as one line, never empty (empty is "unchecked"), and
// different whenever a setting is.
TEST(JobConfigTest, UpdateRuleIsTheOptimizerSection) {
  proto::JobConfig a;
  EXPECT_EQ(UpdateRuleOf(a), "optimizer { }");
  proto::JobConfig b = a;
  b.mutable_optimizer()->set_lr_schedule("cosine");
  EXPECT_EQ(UpdateRuleOf(b), "optimizer { lr_schedule: \"cosine\" }");
  b.mutable_training()->set_steps(7);  // not an optimizer setting
  EXPECT_EQ(UpdateRuleOf(b), "optimizer { lr_schedule: \"cosine\" }");
}

// The policy's kinds are parsed once, here; its text is the configured one.
TEST(JobConfigTest, LrPolicyOfParsesTheScalingAndTheSchedule) {
  auto loaded = Load(
      "optimizer { lr: 0.2 lr_scaling: \"sqrt\" base_batch: 64 lr_schedule: \"step\" "
      "lr_decay_steps: \"10,20\" }");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const LrPolicy p = LrPolicyOf(loaded->config);
  EXPECT_EQ(p.scaling, LrScaling::kSqrt);
  EXPECT_EQ(p.schedule, LrSchedule::kStep);
  EXPECT_EQ(p.decay_steps, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(p.Describe(),
            "lr=0.2 scaling=sqrt base_batch=64 warmup_steps=0 schedule=step decay_steps=10,20 "
            "decay_factor=0.1");
}

TEST(JobConfigTest, ErrorsNameTheFileLineFieldValueAndExpectation) {
  auto loaded = Load("cluster { num_workers: 2 }\ntraining {\n  batch_per_device: 0\n}\n");
  EXPECT_EQ(loaded.status().message(),
            "job.pbtxt:3: training.batch_per_device is 0, expected 1..1048576");
  loaded = Load("optimizer {\n  lr: 0.1\n  momentm: 0.5\n}\n");
  EXPECT_THAT(loaded.status().message(), HasSubstr("job.pbtxt:3:"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("momentm"));
  loaded = Load("checkpoint { checkpoint_every: 10 }");
  EXPECT_EQ(loaded.status().message(),
            "job.pbtxt:1: checkpoint.checkpoint_every is 10, expected 0 when "
            "checkpoint.checkpoint_dir is empty");
}

// Two output files that are one would keep only the one written last.
TEST(JobConfigTest, InitWeightsImplyWorkerInit) {
  absl::StatusOr<LoadedJobConfig> loaded = Load("");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(InitSourceOf(loaded->config), std::nullopt);  // the workers' kind's
  loaded = Load("training { init_from: \"seed\" }");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(InitSourceOf(loaded->config), InitSource::kSeed);
  loaded = Load("training { init_from: \"worker\" }");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(InitSourceOf(loaded->config), InitSource::kWorker);
  loaded = Load("training { init_weights: \"w.safetensors\" }");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(InitSourceOf(loaded->config), InitSource::kWorker);
  EXPECT_TRUE(Load("training { init_weights: \"w\" init_from: \"worker\" }").ok());
  EXPECT_EQ(Load("training { init_weights: \"w\" init_from: \"seed\" }").status().message(),
            "job.pbtxt:1: training.init_from is \"seed\", expected worker (or left out) with "
            "--init_weights, whose values worker 0 sends");
  EXPECT_EQ(Load("training { init_from: \"file\" }").status().message(),
            "job.pbtxt:1: training.init_from is \"file\", expected seed or worker, or empty for "
            "the workers' kind's");
}

TEST(JobConfigTest, OutputFilesMustDiffer) {
  EXPECT_TRUE(Load("output { export_path: \"w.st\" summary: \"s.json\" trace: \"t.json\" }").ok());
  EXPECT_THAT(
      Load("output { export_path: \"/tmp/out/w\" summary: \"/tmp//out/./x/../w\" }")
          .status()
          .message(),
      HasSubstr("job.pbtxt:1: output.summary is \"/tmp//out/./x/../w\", expected another file than "
                "output.export_path (both are /tmp/out/w)"));
  EXPECT_THAT(Load("output { metrics_csv: \"run/m\" trace: \"./run/m\" }").status().message(),
              HasSubstr("output.trace is \"./run/m\", expected another file than "
                        "output.metrics_csv (both are /"));
  // A per-rank trace is worker 0's with {rank} 0.
  EXPECT_THAT(Load("output { summary: \"t0\" trace: \"t{rank}\" }").status().message(),
              HasSubstr("output.trace is \"t{rank}\", expected another file than output.summary"));
  EXPECT_TRUE(Load("output { summary: \"t1\" trace: \"t{rank}\" }").ok());
}

TEST(JobConfigTest, SecurityAndPortsAreCheckedTogether) {
  EXPECT_THAT(Load("security { tls_cert: \"c.pem\" tls_ca: \"ca.pem\" }").status().message(),
              HasSubstr("--tls_key (not set) is \"\", expected a key exactly when"));
  EXPECT_THAT(Load("security { tls_cert: \"c.pem\" tls_key: \"k.pem\" }").status().message(),
              HasSubstr("--tls_ca (not set) is \"\", expected a CA exactly when"));
  EXPECT_THAT(Load("security { tls_ca: \"ca.pem\" }").status().message(),
              HasSubstr("security.tls_ca is \"ca.pem\", expected a CA exactly when"));
  EXPECT_TRUE(Load("security { auth_token_file: \"t\" }").ok());  // token alone: allowed
  EXPECT_EQ(Load("server { port: 7070 health_port: 7070 }").status().message(),
            "job.pbtxt:1: server.health_port is 7070, expected another port than server.port");
  EXPECT_THAT(Load("server { health_port: 70000 }").status().message(),
              HasSubstr("server.health_port is 70000, expected 0..65535"));
  EXPECT_EQ(Load("observability { log_format: \"xml\" }").status().message(),
            "job.pbtxt:1: observability.log_format is \"xml\", expected text or json");
  EXPECT_THAT(Load("server { health_port: 9100 }\nobservability { metrics_port: 9100 }")
                  .status()
                  .message(),
              HasSubstr("job.pbtxt:2: observability.metrics_port is 9100, expected another port "
                        "than server.port and server.health_port"));
  EXPECT_THAT(Load("observability { metrics_port: -1 }").status().message(),
              HasSubstr("observability.metrics_port is -1, expected 0..65535 (0: off)"));
  EXPECT_EQ(Load("optimizer { lr_schedule: \"exp\" }").status().message(),
            "job.pbtxt:1: optimizer.lr_schedule is \"exp\", expected constant, step or cosine");
  EXPECT_EQ(Load("optimizer { optimizer: \"rmsprop\" }").status().message(),
            "job.pbtxt:1: optimizer.optimizer is \"rmsprop\", expected sgd, adam or adamw");
  EXPECT_EQ(Load("optimizer { lr_scaling: \"cubic\" }").status().message(),
            "job.pbtxt:1: optimizer.lr_scaling is \"cubic\", expected none, linear or sqrt");
  EXPECT_THAT(Load("optimizer { optimizer: \"adam\" nesterov: true }").status().message(),
              HasSubstr("expected false unless optimizer is sgd with momentum > 0"));
  EXPECT_THAT(Load("optimizer { lr_schedule: \"cosine\" lr: 0.1 lr_final: 0.2 }")
                  .status()
                  .message(),
              HasSubstr("optimizer.lr_final is 0.2, expected at most optimizer.lr"));
  EXPECT_TRUE(Load("optimizer { optimizer: \"adamw\" lr_scaling: \"sqrt\" base_batch: 64 "
                   "lr_schedule: \"cosine\" }")
                  .ok());
  EXPECT_THAT(Load("optimizer { lr_scaling: \"linear\" }").status().message(),
              HasSubstr("--base_batch (not set) is 0, expected the global batch"));
  EXPECT_THAT(Load("optimizer { warmup_steps: -1 }").status().message(),
              HasSubstr("optimizer.warmup_steps is -1, expected >= 0"));
  EXPECT_THAT(Load("optimizer { lr_schedule: \"step\" lr_decay_steps: \"9,3\" }")
                  .status()
                  .message(),
              HasSubstr("optimizer.lr_decay_steps is \"9,3\", expected ascending whole numbers"));
  EXPECT_THAT(Load("optimizer { lr_schedule: \"step\" }").status().message(),
              HasSubstr("--lr_decay_steps (not set) is \"\", expected milestones in exactly one "
                        "of lr_decay_steps and lr_decay_epochs"));
  // A value for what the optimizer or schedule does not use would be ignored.
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"optimizer { optimizer: \"adam\" momentum: 0.5 }",
            "optimizer.momentum is 0.5, expected 0 unless optimizer is sgd"},
           {"optimizer { beta2: 0.99 }",
            "optimizer.beta2 is 0.99, expected unset unless optimizer is adam or adamw"},
           {"optimizer { lr_final: 0.01 }",
            "optimizer.lr_final is 0.01, expected unset unless lr_schedule is cosine"},
           {"optimizer { lr_decay_factor: 0.5 lr_schedule: \"cosine\" }",
            "optimizer.lr_decay_factor is 0.5, expected unset unless lr_schedule is step"},
           {"optimizer { base_batch: 64 }",
            "optimizer.base_batch is 64, expected unset unless lr_scaling is linear or sqrt"},
       }) {
    EXPECT_THAT(Load(text).status().message(), HasSubstr(message)) << text;
  }
  EXPECT_TRUE(Load("optimizer { optimizer: \"adamw\" beta1: 0.8 epsilon: 1e-6 momentum: 0 "
                   "lr_schedule: \"cosine\" lr_final: 0.001 }")
                  .ok());
  EXPECT_THAT(Load("training { model: \"mlp:784-0-10\" }").status().message(),
              HasSubstr("job.pbtxt:1: training.model is \"mlp:784-0-10\", expected mlp, "));
  EXPECT_THAT(Load("training { model: \"mlp:784-0-10\" }").status().message(),
              HasSubstr("(width 0 is out of range 1..1048576)"));
  EXPECT_EQ(Load("training { accumulation_steps: 0 }").status().message(),
            "job.pbtxt:1: training.accumulation_steps is 0, expected 1..65536 micro-batches per "
            "step");
  EXPECT_EQ(Load("training {\n  wire_dtype: \"fp8\"\n}").status().message(),
            "job.pbtxt:2: training.wire_dtype is \"fp8\", expected float32, bf16 or fp16");
  EXPECT_THAT(Load("cluster {\n  tcp_congestion: \"warp\"\n}").status().message(),
              AllOf(HasSubstr("job.pbtxt:2: cluster.tcp_congestion is \"warp\", expected auto, "
                              "system or an algorithm of the kernel's (available: "),
                    HasSubstr("): 'warp' is not available in this kernel")));
  EXPECT_TRUE(Load("cluster { tcp_congestion: \"system\" }").ok());
  EXPECT_EQ(Load("training { push_window_kb: -1 }").status().message(),
            "job.pbtxt:1: training.push_window_kb is -1, expected 0..1073741824 (0: automatic)");
  EXPECT_EQ(Load("training { overlap_min_kb: -2 }").status().message(),
            "job.pbtxt:1: training.overlap_min_kb is -2, expected 0..1073741824 (0: push each "
            "layer as soon as it is ready)");
  EXPECT_TRUE(Load("training { overlap_min_kb: 0 }").ok());
  EXPECT_THAT(Load("training { blas_core: \"Has well\" }").status().message(),
              HasSubstr("training.blas_core is \"Has well\", expected an OpenBLAS core name"));
  EXPECT_TRUE(Load("training { blas_core: \"Haswell\" }").ok());
  EXPECT_THAT(Load("timeouts { stop_grace_s: 601 }").status().message(),
              HasSubstr("timeouts.stop_grace_s is 601, expected 0..600 seconds"));
  EXPECT_THAT(Load("timeouts { idle_timeout_s: 0 }").status().message(),
              HasSubstr("timeouts.idle_timeout_s is 0, expected 1..86400"));
  EXPECT_THAT(Load("output { metrics_csv_every: 0 }").status().message(),
              HasSubstr("output.metrics_csv_every is 0, expected >= 1"));
}

TEST(JobConfigTest, FlagsOverrideTheFileAndAreNamedInErrors) {
  LoadedJobConfig loaded;
  ASSERT_TRUE(ParseJobConfig("job.pbtxt", "optimizer { lr: 0.5 momentum: 0.8 }", &loaded).ok());
  ASSERT_TRUE(SetJobConfigField("lr", "0.25", "--lr", &loaded).ok());
  EXPECT_EQ(loaded.config.optimizer().lr(), 0.25);
  EXPECT_EQ(loaded.config.optimizer().momentum(), 0.8);
  ASSERT_TRUE(SetJobConfigField("momentum", "1.5", "--momentum", &loaded).ok());
  EXPECT_EQ(FinishJobConfig(&loaded).message(),
            "--momentum is 1.5, expected 0 <= momentum < 1 in float32 (at most 0.99999994)");
  // Values are checked as the servers' float32 will hold them, and named as given.
  ASSERT_TRUE(SetJobConfigField("momentum", "0.99999999999", "--momentum", &loaded).ok());
  EXPECT_THAT(FinishJobConfig(&loaded).message(), HasSubstr("--momentum is 0.99999999999,"));
  ASSERT_TRUE(SetJobConfigField("momentum", "0.9", "--momentum", &loaded).ok());
  for (const char* lr : {"1e-300", "1e+300"}) {
    ASSERT_TRUE(SetJobConfigField("lr", lr, "--lr", &loaded).ok());
    EXPECT_EQ(FinishJobConfig(&loaded).message(),
              absl::StrCat("--lr is ", lr, ", expected a number > 0 that float32 holds (about "
                           "1.4e-45 to 3.4e38)"));
  }
  ASSERT_TRUE(SetJobConfigField("lr", "0.1", "--lr", &loaded).ok());
  ASSERT_TRUE(SetJobConfigField("lr_schedule", "cosine", "--lr_schedule", &loaded).ok());
  ASSERT_TRUE(SetJobConfigField("lr_final", "1", "--lr_final", &loaded).ok());
  EXPECT_THAT(FinishJobConfig(&loaded).message(),
              HasSubstr("--lr_final is 1, expected at most optimizer.lr"));
  ASSERT_TRUE(SetJobConfigField("lr_final", "0.01", "--lr_final", &loaded).ok());
  EXPECT_TRUE(FinishJobConfig(&loaded).ok());
  absl::Status bad = SetJobConfigField("epochs", "many", "--epochs", &loaded);
  EXPECT_EQ(bad.message(), "--epochs is 'many', expected a int32");
  EXPECT_THAT(SetJobConfigField("nonsense", "1", "--nonsense", &loaded).message(),
              HasSubstr("no job configuration field 'nonsense'"));
}

TEST(JobConfigTest, WireDTypeFromTheFileOrAFlag) {
  auto loaded = Load("");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.training().wire_dtype(), "float32");
  loaded = Load("training { wire_dtype: \"bf16\" }");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.training().wire_dtype(), "bf16");
  LoadedJobConfig flagged;
  ASSERT_TRUE(SetJobConfigField("wire_dtype", "fp16", "--wire_dtype", &flagged).ok());
  EXPECT_TRUE(FinishJobConfig(&flagged).ok());
  ASSERT_TRUE(SetJobConfigField("wire_dtype", "half", "--wire_dtype", &flagged).ok());
  EXPECT_EQ(FinishJobConfig(&flagged).message(),
            "--wire_dtype is \"half\", expected float32, bf16 or fp16");
}

TEST(JobConfigTest, JsonFilesToo) {
  auto loaded = Load(R"({"cluster": {"numServers": 2, "numWorkers": 3},
                         "training": {"model": "cnn"}})",
                     "job.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.cluster().num_workers(), 3);
  EXPECT_EQ(loaded->config.training().model(), "cnn");
  loaded = Load("{\"training\": {\n  \"model\": \"rnn\"}}", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()),
              ::testing::StartsWith("job.json:2: training.model is \"rnn\", expected mlp, "));
  // protobuf's own errors get the line of the key they name.
  loaded = Load("{\"training\":\n {\"modle\": \"cnn\"}}", "job.json");
  EXPECT_EQ(loaded.status().message(), "job.json:2: (training) modle: Cannot find field.");
  loaded = Load("{\"cluster\": {\n\n \"numWorkers\": 1.5}}", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()),
              ::testing::StartsWith("job.json:3: (cluster.num_workers): invalid value 1.5"));
  loaded = Load("{\n\"trainingg\": {}}", "job.json");
  EXPECT_EQ(loaded.status().message(), "job.json:2: trainingg: Cannot find field.");
  loaded = Load("{\"optimizer\":\n {\"lr\": 1e400}}", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()),
              ::testing::StartsWith("job.json:2:9: the number 1e400 is out of the range of a double"));
  // One value per field, as in the text format: not the last one silently.
  loaded = Load("{\"optimizer\": {\"lr\": 0.1,\n  \"lr\": 0.2}}", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()),
              ::testing::StartsWith("job.json:2:3: the key \"lr\" appears twice in one object "
                                    "(first on line 1)"));
  loaded = Load(R"({"optimizer": {"lr_schedule": "cosine", "lrSchedule": "step"}})", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr("the keys \"lr_schedule\" (line 1) and \"lrSchedule\" name the same "
                        "field"));
  // protobuf matches field names with their case: "LR" is no spelling of lr.
  loaded = Load(R"({"optimizer": {"lr": 0.1, "LR": 0.2}})", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("LR"));
  EXPECT_THAT(std::string(loaded.status().message()), Not(HasSubstr("twice")));
  loaded = Load("{\"optimizer\": {\n  \"lr\": 0.1,,\n}}", "job.json");
  EXPECT_THAT(std::string(loaded.status().message()), ::testing::StartsWith("job.json:2:13: expected a key"));
}

// A file in a fresh folder of the test's own.
std::string TestPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/job_config_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::filesystem::remove_all(path);
  return path;
}

TEST(JobConfigTest, ReadsAFile) {
  const std::string path = TestPath("job.pbtxt");
  std::ofstream(path) << "optimizer {\n  lr: 0.5\n}\n";
  LoadedJobConfig loaded;
  ASSERT_EQ(ReadJobConfigFile(path, &loaded), absl::OkStatus());
  EXPECT_EQ(loaded.config.optimizer().lr(), 0.5);
  EXPECT_EQ(loaded.sources["lr"], path + ":2");
  EXPECT_EQ(ReadJobConfigFile(TestPath("missing.pbtxt"), &loaded).code(),
            absl::StatusCode::kNotFound);
}

TEST(JobConfigTest, RefusesWhatIsNotASmallRegularFile) {
  LoadedJobConfig loaded;
  const std::string dir = TestPath("dir.pbtxt");
  std::filesystem::create_directories(dir);
  absl::Status s = ReadJobConfigFile(dir, &loaded);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            absl::StrCat("job configuration ", dir, " is a directory, expected a regular file"));

  // Opened without a writer: must fail at once, not wait for one.
  const std::string fifo = TestPath("fifo.pbtxt");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  s = ReadJobConfigFile(fifo, &loaded);
  EXPECT_EQ(s.message(),
            absl::StrCat("job configuration ", fifo, " is a FIFO, expected a regular file"));

  s = ReadJobConfigFile("/dev/zero", &loaded);  // would never end
  EXPECT_EQ(s.message(), "job configuration /dev/zero is a device, expected a regular file");

  const std::string huge = TestPath("huge.pbtxt");
  std::ofstream(huge) << std::string(kMaxJobConfigFileBytes + 1, '#');
  s = ReadJobConfigFile(huge, &loaded);
  EXPECT_EQ(s.message(), absl::StrCat("job configuration ", huge, " has 1048577 bytes, "
                                      "expected at most 1048576"));
}

TEST(JobConfigTest, ServerAddressesFromAListOrAPattern) {
  auto list = Load(R"(cluster { servers: "a:1,b:2" })");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->config.cluster().num_servers(), 2);
  EXPECT_THAT(ServerAddresses(list->config), ::testing::ElementsAre("a:1", "b:2"));
  auto pattern = Load(R"(cluster { num_servers: 3 servers: "ps-{rank}.ps:7070" })");
  ASSERT_TRUE(pattern.ok()) << pattern.status();
  EXPECT_THAT(ServerAddresses(pattern->config),
              ::testing::ElementsAre("ps-0.ps:7070", "ps-1.ps:7070", "ps-2.ps:7070"));
  auto mismatch = Load("cluster {\n  num_servers: 3\n  servers: \"a:1,b:2\"\n}");
  EXPECT_EQ(mismatch.status().message(),
            "job.pbtxt:3: cluster.servers is \"a:1,b:2\", expected 3 addresses "
            "(cluster.num_servers)");
  auto bad_port = Load("cluster {\n  servers: \"a:1,b:99999\"\n}");
  EXPECT_EQ(bad_port.status().message(),
            "job.pbtxt:2: cluster.servers is \"a:1,b:99999\", expected host:port addresses "
            "(entry 'b:99999' is not host:port with a port in 1..65535)");
  LoadedJobConfig flagged;
  ASSERT_TRUE(SetJobConfigField("num_servers", "2", "--num_servers", &flagged).ok());
  ASSERT_TRUE(SetJobConfigField("servers", "ps-{rank}:x", "--servers", &flagged).ok());
  EXPECT_EQ(FinishJobConfig(&flagged).message(),
            "--servers is \"ps-{rank}:x\", expected host:port addresses (entry 'ps-0:x' is not "
            "host:port with a port in 1..65535)");
  // Each server needs an address of its own, and a host that can be dialled.
  auto twice = Load(R"(cluster { servers: "a:1,b:2,a:1" })");
  EXPECT_THAT(twice.status().message(),
              HasSubstr("(entry 'a:1' is given twice (servers 0 and 2), expected one address "
                        "per server)"));
  twice = Load(R"(cluster { servers: "Ps-0:7070,ps-0:07070" })");
  EXPECT_THAT(twice.status().message(), HasSubstr("entry 'ps-0:07070' is given twice"));
  for (const char* host : {"::1", " a", "a b", "h\\xff", "[::1", "[]", "[g::1]"}) {
    auto bad_host = Load(absl::StrCat(R"(cluster { servers: ")", host, R"(:7070" })"));
    EXPECT_THAT(bad_host.status().message(), HasSubstr("IPv6 address in brackets")) << host;
  }
  for (const char* good : {"[::1]:7070", "ps-0.ps.default.svc:7070", "10.0.0.1:1,my_host:2"}) {
    EXPECT_TRUE(Load(absl::StrCat(R"(cluster { servers: ")", good, R"(" })")).ok()) << good;
  }
}

TEST(JobConfigTest, RanksFromAFlagOrFromThePod) {
  EXPECT_EQ(*ResolveRank(Role::kWorker, "--worker_rank", "2", 3), 2);
  EXPECT_EQ(ResolveRank(Role::kWorker, "--worker_rank", "3", 3).status().message(),
            "--worker_rank=3: expected a rank in 0..2 or auto");
  unsetenv("JOB_COMPLETION_INDEX");
  EXPECT_THAT(ResolveRank(Role::kWorker, "--worker_rank", "auto", 3).status().message(),
              HasSubstr("$JOB_COMPLETION_INDEX"));
  setenv("JOB_COMPLETION_INDEX", "1", 1);
  EXPECT_EQ(*ResolveRank(Role::kWorker, "--worker_rank", "auto", 3), 1);
  unsetenv("JOB_COMPLETION_INDEX");
}

}  // namespace
}  // namespace psync
