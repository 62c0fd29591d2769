// A live server and worker with --metrics_port and --log_format=json: the
// metrics pass `promtool check metrics` while the job runs and count what
// happened; a real Prometheus server scrapes the server and answers a
// query for its step counter with the job's step count; every log line is
// one JSON object naming the process, and the lifecycle events are there.
// An elastic job's membership metrics count a join, a leave and a loss.
#include <signal.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr int kSteps = 240;

// `promtool check metrics` on `text`: "" when it passes, else its output.
std::string Promtool(const std::string& text, const std::string& name) {
  const std::string path = TempDir() + "/" + name + ".prom";
  WriteFile(path, text);
  const Ended checked = RunToEnd({"/bin/sh", "-c", "promtool check metrics < " + path});
  return checked.exit_code == 0 ? "" : absl::StrCat("exit ", checked.exit_code, ": ", checked.output);
}

// Every line of a process's output is one JSON object of `role` with its
// rank (or null before the rank is known).
void ExpectJsonLines(const std::string& output, const std::string& role, int rank) {
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    // gRPC core's own lines (gpr_log) are not glog's: none are expected here.
    ++lines;
    EXPECT_TRUE(absl::StartsWith(line, "{\"time\":\"") && absl::EndsWith(line, "\"}"))
        << line;
    EXPECT_TRUE(Contains(std::string(line), absl::StrCat("\"role\":\"", role, "\",\"rank\":", rank)) ||
                Contains(std::string(line), absl::StrCat("\"role\":\"", role, "\",\"rank\":null")))
        << line;
  }
  EXPECT_GT(lines, 3);
}

TEST(ObservabilityTest, MetricsPrometheusAndJsonLogsOfALiveJob) {
  PortReservation reserved;
  std::vector<int> ports;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<int> port = reserved.Add();
    ASSERT_TRUE(port.ok()) << port.status();
    ports.push_back(*port);
  }
  const int server_port = ports[0], server_metrics = ports[1], worker_metrics = ports[2],
            prometheus_port = ports[3];
  reserved.Release();
  const std::string servers = absl::StrCat("--servers=127.0.0.1:", server_port);
  auto server = StartProcess(
      {Runfile("server/psync_server"), servers, "--num_workers=1",
       absl::StrCat("--port=", server_port), absl::StrCat("--metrics_port=", server_metrics),
       "--checkpoint_dir=" + FreshDir("ckpt"), "--checkpoint_every=100", "--log_format=json"},
      "server 0");
  ASSERT_NE(server, nullptr);
  auto worker = StartProcess(
      {Runfile("worker/psync_worker"), servers, "--worker_rank=0", "--num_workers=1",
       "--synthetic_samples=2048", "--batch_per_device=8", absl::StrCat("--steps=", kSteps),
       "--device=cpu", "--devices=2", absl::StrCat("--metrics_port=", worker_metrics),
       "--log_format=json"},
      "worker 0");
  ASSERT_NE(worker, nullptr);

  // The worker's live metrics, once it has trained a step.
  std::string live;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && !worker->Poll().has_value()) {
    live = HttpGet(worker_metrics, "/metrics");
    if (MetricValue(live, "psync_worker_step_duration_seconds_count") > 0) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GT(MetricValue(live, "psync_worker_step_duration_seconds_count"), 0) << live << worker->output();
  EXPECT_EQ(Promtool(live, "worker"), "");
  for (const char* series :
       {"psync_worker_phase_seconds_total{phase=\"compute\"}",
        "psync_worker_phase_seconds_total{phase=\"reduce\"}",
        "psync_worker_phase_seconds_total{phase=\"communication\"}",
        "psync_worker_samples_per_second", "psync_worker_loss",
        "psync_worker_step_duration_seconds_count", "process_open_fds"}) {
    EXPECT_FALSE(std::isnan(MetricValue(live, series))) << series << " missing:\n" << live;
  }
  const std::string server_live = HttpGet(server_metrics, "/metrics");
  EXPECT_EQ(Promtool(server_live, "server_live"), "");
  EXPECT_EQ(MetricValue(server_live, "psync_server_registered_workers"), 1) << server_live;

  ASSERT_EQ(worker->Wait(absl::Now() + absl::Seconds(120)), 0) << worker->output();
  // A server started by hand says once that the job is done, what it saved
  // and how to stop it.
  EXPECT_TRUE(WaitForOutput(*server,
                            absl::StrCat("server 0: the job finished at version ", kSteps,
                                         " (every worker done); final checkpoint written (version ",
                                         kSteps, " in "),
                            absl::Now() + absl::Seconds(30)))
      << server->output();
  // The server has applied every step and stays up, idle.
  const std::string done = HttpGet(server_metrics, "/metrics");
  EXPECT_EQ(Promtool(done, "server_done"), "");
  EXPECT_EQ(MetricValue(done, "psync_server_version"), kSteps) << done;
  EXPECT_EQ(MetricValue(done, "psync_server_steps_applied_total"), kSteps) << done;
  EXPECT_EQ(MetricValue(done, "psync_server_requests_total{method=\"Register\",code=\"OK\"}"), 1);
  EXPECT_GE(MetricValue(done, "psync_server_requests_total{method=\"PushPull\",code=\"OK\"}"), kSteps);
  EXPECT_GT(MetricValue(done, "psync_server_received_bytes_total{method=\"PushPull\"}"), 0);
  EXPECT_GE(MetricValue(done, "psync_server_request_duration_seconds_count{method=\"PushPull\"}"),
            kSteps);
  EXPECT_EQ(MetricValue(done, "psync_server_checkpoints_written_total"), 3) << done;  // 100, 200, 240
  EXPECT_EQ(MetricValue(done, "psync_server_checkpoint_newest_version"), kSteps);
  EXPECT_GE(MetricValue(done, "psync_server_checkpoint_age_seconds"), 0);
  EXPECT_EQ(MetricValue(done, "psync_server_pulls_waiting"), 0);
  EXPECT_EQ(MetricValue(done, "psync_server_rollbacks_total"), 0);

  // A real Prometheus server scrapes it and answers a query.
  const std::string prometheus_dir = FreshDir("prometheus");
  WriteFile(prometheus_dir + "/prometheus.yml",
            absl::StrCat("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                         "scrape_configs:\n  - job_name: psync\n    static_configs:\n"
                         "      - targets: ['127.0.0.1:", server_metrics, "']\n"));
  auto prometheus = StartProcess(
      {"/usr/bin/prometheus", "--config.file=" + prometheus_dir + "/prometheus.yml",
       "--storage.tsdb.path=" + prometheus_dir + "/data",
       absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port), "--log.level=warn"},
      "prometheus");
  ASSERT_NE(prometheus, nullptr);
  std::string answer;
  const std::string query = "/api/v1/query?query=psync_server_steps_applied_total";
  const absl::Time scrape_deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < scrape_deadline && !prometheus->Poll().has_value()) {
    answer = HttpGet(prometheus_port, query);
    if (Contains(answer, "\"result\":[{")) break;
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_TRUE(Contains(answer, "\"status\":\"success\"")) << answer << prometheus->output();
  EXPECT_TRUE(Contains(answer, "\"job\":\"psync\"")) << answer;
  EXPECT_TRUE(Contains(answer, absl::StrCat(",\"", kSteps, "\"]"))) << answer;
  const std::string up = HttpGet(prometheus_port, "/api/v1/query?query=up");
  EXPECT_TRUE(Contains(up, ",\"1\"]")) << up;
  prometheus->Stop(absl::Seconds(10));

  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(absl::Now() + absl::Seconds(30)), 0);

  // Logs: one JSON object per line, each naming its process; the
  // lifecycle from start (with the configuration) to shutdown.
  const std::string server_log = server->DrainedOutput(absl::Now() + absl::Seconds(5));
  const std::string worker_log = worker->DrainedOutput(absl::Now() + absl::Seconds(5));
  ExpectJsonLines(server_log, "server", 0);
  ExpectJsonLines(worker_log, "worker", 0);
  for (const char* event :
       {"server 0 starting; configuration: ", "listening on 127.0.0.1:", "metrics on http://",
        "worker 0 registered", "checkpoint of version 100 written",
        "stop me with SIGTERM", "received SIGTERM", "server 0 stopped"}) {
    EXPECT_EQ(LinesWith(server_log, event).size() >= 1, true) << event << "\n" << server_log;
  }
  EXPECT_EQ(Count(server_log, "the job finished at version"), 1) << server_log;
  for (const char* event : {"worker 0 starting; configuration: ", "worker 0 registered",
                            "epoch 1 step ", "worker 0 finished 240 steps"}) {
    EXPECT_EQ(LinesWith(worker_log, event).size() >= 1, true) << event << "\n" << worker_log;
  }
}

// An elastic job of 1..3 workers: workers 0 and 1 start it, worker 2 joins,
// worker 1 leaves (SIGTERM), worker 2 is lost (kill -9). Each change shows
// in server 0's metrics once the coordinator has made it.
TEST(ObservabilityTest, MembershipMetricsOfAnElasticJob) {
  PortReservation reserved;
  absl::StatusOr<int> port = reserved.Add();
  absl::StatusOr<int> metrics_port = reserved.Add();
  ASSERT_TRUE(port.ok() && metrics_port.ok());
  reserved.Release();
  const std::string servers = absl::StrCat("--servers=127.0.0.1:", *port);
  auto server = StartProcess({Runfile("server/psync_server"), servers, "--num_workers=3",
                              "--min_workers=1", absl::StrCat("--port=", *port),
                              absl::StrCat("--metrics_port=", *metrics_port)},
                             "server 0");
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Subprocess>> workers(3);
  auto start_worker = [&](int rank) {
    workers[rank] = StartProcess(
        {Runfile("worker/psync_worker"), servers, absl::StrCat("--worker_rank=", rank),
         "--num_workers=3", "--min_workers=1", "--synthetic_samples=640", "--steps=100000",
         "--device=cpu"},
        absl::StrCat("worker ", rank));
    return workers[rank] != nullptr;
  };
  // Scrapes until `series` is `value`, at most 30 s: the last scrape.
  auto scrape_until = [&](const std::string& series, double value) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    std::string text;
    do {
      text = HttpGet(*metrics_port, "/metrics");
      if (MetricValue(text, series) == value) break;
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
    return text;
  };

  ASSERT_TRUE(start_worker(0) && start_worker(1));
  // The first members are both, or worker 0 and then worker 1 joins (if it
  // asked more than 1 s after worker 0): one change or two.
  std::string text = scrape_until("psync_server_members", 2);
  EXPECT_EQ(Promtool(text, "elastic"), "");
  EXPECT_EQ(MetricValue(text, "psync_server_members"), 2) << text;
  EXPECT_EQ(MetricValue(text, "psync_server_workers_joined_total"), 2) << text;
  const double changes = MetricValue(text, "psync_server_membership_changes_total");
  EXPECT_TRUE(changes == 1 || changes == 2) << text;

  ASSERT_TRUE(start_worker(2));
  text = scrape_until("psync_server_members", 3);
  EXPECT_EQ(MetricValue(text, "psync_server_workers_joined_total"), 3) << text;
  EXPECT_EQ(MetricValue(text, "psync_server_pending_joins"), 0) << text;

  workers[1]->Signal(SIGTERM);
  EXPECT_EQ(workers[1]->Wait(absl::Now() + absl::Seconds(30)), 0) << workers[1]->output();
  text = scrape_until("psync_server_workers_left_total", 1);
  EXPECT_EQ(MetricValue(text, "psync_server_workers_left_total"), 1) << text;
  EXPECT_EQ(MetricValue(text, "psync_server_members"), 2) << text;

  workers[2]->Signal(SIGKILL);
  ASSERT_TRUE(workers[2]->Wait(absl::Now() + absl::Seconds(10)).has_value());
  text = scrape_until("psync_server_workers_lost_total", 1);
  EXPECT_EQ(Promtool(text, "elastic_lost"), "");
  EXPECT_EQ(MetricValue(text, "psync_server_workers_lost_total"), 1) << text;
  EXPECT_EQ(MetricValue(text, "psync_server_members"), 1) << text;
  EXPECT_EQ(MetricValue(text, "psync_server_workers_joined_total"), 3) << text;
  EXPECT_EQ(MetricValue(text, "psync_server_membership_changes_total"), changes + 3) << text;
  workers[0]->Stop(absl::Seconds(10));
  server->Stop(absl::Seconds(10));
}

TEST(ObservabilityTest, BadObservabilityFlagsFailAtStart) {
  const Ended bad_format = RunToEnd({Runfile("server/psync_server"), "--log_format=xml"});
  EXPECT_EQ(bad_format.exit_code, 2);
  EXPECT_TRUE(Contains(bad_format.output, "--log_format is \"xml\", expected text or json"))
      << bad_format.output;
  const Ended bad_port = RunToEnd({Runfile("worker/psync_worker"), "--metrics_port=70000",
                                   "--servers=127.0.0.1:1"});
  EXPECT_EQ(bad_port.exit_code, 2);
  EXPECT_TRUE(Contains(bad_port.output, "--metrics_port is 70000, expected 0..65535 (0: off)"))
      << bad_port.output;
}

}  // namespace
}  // namespace psync
