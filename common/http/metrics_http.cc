#include "common/http/metrics_http.h"

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/listen_error.h"
#include "httplib.h"

namespace psync {
namespace {

// httplib's ThreadPool queues every accepted connection, without bound, for
// its threads: clients that connect and stay idle (or drip a byte every few
// seconds) held both threads while the queue took a descriptor per waiting
// connection, until the process had none left and its gRPC port stopped
// accepting for good. Here a connection that finds `threads` busy and
// `queued` waiting runs on the listener's own thread instead, which stops
// accepting meanwhile: later clients wait in the kernel's listen backlog,
// holding none of this process's descriptors.
class BoundedPool final : public httplib::TaskQueue {
 public:
  BoundedPool(int threads, size_t queued) : queued_(queued) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        while (std::function<void()> job = Next()) job();
      });
    }
  }
  ~BoundedPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.size() < queued_) {
        jobs_.push_back(std::move(fn));
        ready_.notify_one();
        return;
      }
    }
    fn();  // on the listener's thread: no more connections until it is done
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  // The next job, or an empty one once stopping with none left.
  std::function<void()> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return nullptr;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    return job;
  }

  const size_t queued_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class HttplibMetricsServer final : public MetricsHttpServer {
 public:
  explicit HttplibMetricsServer(const MetricRegistry* registry) {
    // A scrape is one short request: a few threads and short timeouts, so
    // that an idle or slow client holds a thread for seconds at most, and a
    // bounded queue (BoundedPool) of connections waiting for them.
    server_.new_task_queue = [] { return new BoundedPool(kThreads, kQueued); };
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
    // httplib answers a Range header with each range listed, as a part of
    // a multipart answer: 1,300 ranges made a 4 KB request an 18.6 MB
    // answer. A scrape has no use for them: the whole page it is.
    server_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
      const_cast<httplib::Request&>(req).ranges.clear();  // httplib's own, not const
      return httplib::Server::HandlerResponse::Unhandled;
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
      const absl::Status why = ListenError(absl::StrCat(host, ":", port), "--metrics_port");
      return absl::Status(why.code(), absl::StrCat("metrics: ", why.message()));
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
  static constexpr int kThreads = 4;
  static constexpr size_t kQueued = 16;

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
