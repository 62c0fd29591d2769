#include "common/http/metrics_http.h"

#include <sys/socket.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"

namespace psync {
namespace {

class HttplibMetricsServer final : public MetricsHttpServer {
 public:
  explicit HttplibMetricsServer(const MetricRegistry* registry) {
    // A scrape is one short request: two threads and short timeouts, so that
    // an idle or slow client holds a thread (and a queued connection its
    // descriptor) for seconds at most.
    server_.new_task_queue = [] { return new httplib::ThreadPool(2); };
    server_.set_read_timeout(5, 0);
    server_.set_write_timeout(5, 0);
    server_.set_keep_alive_timeout(2);
    server_.set_keep_alive_max_count(100);
    server_.set_payload_max_length(64 << 10);
    // httplib's default sets SO_REUSEPORT, which would let a second process
    // bind the same port and take half of the scrapes.
    server_.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    server_.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
      res.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("psync: metrics are on /metrics\n", "text/plain");
    });
  }

  ~HttplibMetricsServer() override {
    // stop() does nothing until the loop runs: repeat it until the loop ended.
    while (thread_.joinable() && !loop_ended_.load()) {
      server_.stop();
      absl::SleepFor(absl::Milliseconds(1));
    }
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Start(const std::string& host, int port) {
    port_ = port == 0 ? server_.bind_to_any_port(host) : (server_.bind_to_port(host, port) ? port : -1);
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat(
          "metrics: cannot listen on ", host, ":", port,
          " (is the port taken? expected a free port for --metrics_port)"));
    }
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      loop_ended_.store(true);
    });
    // stop() does nothing before the loop runs: wait for it, so that the
    // destructor cannot miss it.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!server_.is_running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    if (!server_.is_running()) {
      return absl::InternalError(absl::StrCat("metrics: the listener on ", host, ":", port_,
                                              " did not start within 10 s"));
    }
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::atomic<bool> loop_ended_{false};
  std::thread thread_;  // runs listen_after_bind until stop()
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricRegistry* registry, const std::string& host, int port) {
  auto server = std::make_unique<HttplibMetricsServer>(registry);
  absl::Status s = server->Start(host, port);
  if (!s.ok()) return s;
  return std::unique_ptr<MetricsHttpServer>(std::move(server));
}

}  // namespace psync
