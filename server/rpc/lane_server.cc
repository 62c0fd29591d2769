#include "server/rpc/lane_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/process/listen_error.h"
#include "common/security/security.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {
namespace {

// Connections kept besides max_connections, for those not authenticated
// yet (each closed at the hello timeout), and an answer's error message,
// at most.
constexpr int kMaxWithoutHello = 64;
constexpr size_t kMaxMessage = 16 << 10;

}  // namespace

// What the request bodies read and still held may take together. A
// connection waits for room before it reads a body; a body's buffer gives
// its room back when it is freed (a push-pull frees its request once the
// store has taken the gradients).
class LaneBudget {
 public:
  explicit LaneBudget(int64_t bound) : left_(bound), bound_(bound) {}

  // Takes `n` (at most the whole bound) once there is room; false if the
  // server stops first.
  bool Take(int64_t n, const std::atomic<bool>& stopping) {
    n = std::min(n, bound_);
    absl::MutexLock lock(&mu_);
    auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ >= n || stopping.load(); };
    while (!room()) mu_.AwaitWithTimeout(absl::Condition(&room), absl::Milliseconds(100));
    if (stopping.load()) return false;
    left_ -= n;
    return true;
  }
  void Give(int64_t n) {
    absl::MutexLock lock(&mu_);
    left_ += std::min(n, bound_);
  }

 private:
  absl::Mutex mu_;
  int64_t left_ ABSL_GUARDED_BY(mu_);
  const int64_t bound_;
};

// One accepted connection: a thread reads and runs its calls, a LaneWriter
// writes their answers. Shared by its calls, which answer through it.
class LaneConnection : public std::enable_shared_from_this<LaneConnection> {
 public:
  LaneConnection(int fd, std::string peer, const LaneServerOptions& options,
                 const LaneServer::Handler& handler, std::shared_ptr<LaneBudget> budget,
                 const std::atomic<bool>& stopping, std::atomic<int>& authenticated)
      : fd_(fd),
        owned_fd_{fd},
        peer_(std::move(peer)),
        options_(options),
        handler_(handler),
        budget_(std::move(budget)),
        stopping_(stopping),
        authenticated_(authenticated),
        writer_(fd, [this](const absl::Status&) { Close(); }) {}
  ~LaneConnection() { Close(); }

  void Start() {
    reader_ = std::thread([self = shared_from_this()] { self->Read(); });
  }
  // Joins the reading thread (which has ended, or ends once Close runs).
  void Join() {
    if (reader_.joinable()) reader_.join();
  }
  bool ended() const { return ended_.load(); }
  bool closed() const { return closed_.load(); }
  const std::string& peer() const { return peer_; }

  void Close() {
    if (closed_.exchange(true)) return;
    shutdown(fd_, SHUT_RDWR);
    writer_.Drop();
  }

  void Answer(uint64_t id, const absl::Status& status, grpc::ByteBuffer body) {
    if (closed_.load()) return;
    LaneHeader h;
    h.kind = static_cast<uint32_t>(status.code());
    h.call_id = id;
    if (id == 0) h.version = kLaneVersion;  // answers to call 0: the hello's
    std::string message(status.message().substr(0, kMaxMessage));
    h.aux = static_cast<uint32_t>(message.size());
    if (status.ok()) {
      h.body_bytes = body.Length();
    } else {
      body.Clear();
    }
    writer_.Send(h, std::move(message), std::move(body));
  }

 private:
  void Read() {
    absl::Status s = Hello();
    while (s.ok()) s = ReadCall();
    if (absl::IsFailedPrecondition(s)) {
      // A worker of another build, refused again each time it retries.
      LOG_FIRST_N(WARNING, 1) << "payload lane: closing the connection of " << peer_ << ": "
                              << s.message() << " (said once; such workers' calls go "
                              << "through gRPC)";
    } else if (!closed_.load() && !stopping_.load() && !absl::IsUnavailable(s)) {
      LOG(WARNING) << "payload lane: closing the connection of " << peer_ << ": " << s.message();
    }
    Close();
    if (counted_) authenticated_.fetch_sub(1);
    ended_.store(true);
  }

  // The connection's first frame, within the hello timeout: a hello with
  // the job's token. Counts the connection among the authenticated ones,
  // which are at most max_connections.
  absl::Status Hello() {
    const absl::Time deadline = absl::Now() + options_.hello_timeout;
    const LaneTick in_time = [deadline] {
      return absl::Now() < deadline ? absl::OkStatus()
                                    : absl::DeadlineExceededError("no hello in time");
    };
    char head[LaneHeader::kBytes];
    PSYNC_RETURN_IF_ERROR(ReadFully(fd_, head, sizeof head, "reading the hello", in_time));
    absl::StatusOr<LaneHeader> h = DecodeLaneHeader(head);
    if (!h.ok()) return Refuse(0, h.status());
    constexpr uint64_t kMaxToken = 4096;
    if (h->kind != static_cast<uint32_t>(LaneMethod::kHello) || h->body_bytes > kMaxToken) {
      return Refuse(0,
                    absl::InvalidArgumentError(absl::StrCat(
                        "payload lane: the first frame is method ", h->kind, " of ", h->body_bytes,
                        " bytes, expected a hello (method 1) of at most ", kMaxToken)));
    }
    std::string token(h->body_bytes, '\0');
    PSYNC_RETURN_IF_ERROR(ReadFully(fd_, token.data(), token.size(), "reading the hello", in_time));
    if (h->version != kLaneVersion) {
      return Refuse(0, absl::FailedPreconditionError(absl::StrCat(
                           "payload lane: the worker speaks lane version ", h->version,
                           h->version == 0 ? " (a build before versions)" : "",
                           ", this server ", kLaneVersion,
                           ": run one psync build on the job's workers and servers")));
    }
    if (!options_.token.empty() && !TokenMatches(options_.token, token)) {
      return Refuse(0, absl::UnauthenticatedError(
                           "payload lane: missing or wrong token: the job's servers require "
                           "the token of security.auth_token_file"));
    }
    if (authenticated_.fetch_add(1) >= options_.max_connections) {
      authenticated_.fetch_sub(1);
      return Refuse(0, absl::ResourceExhaustedError(
                           absl::StrCat("payload lane: ", options_.max_connections,
                                        " connections are open, the most this server keeps")));
    }
    counted_ = true;
    Answer(0, absl::OkStatus(), grpc::ByteBuffer());  // welcome: calls may come
    return absl::OkStatus();
  }

  // Reads one call and runs it, once the answers queued on the connection
  // leave room: a peer that sends calls and reads no answers holds at most
  // that much.
  absl::Status ReadCall() {
    const size_t backlog = 2 * static_cast<size_t>(options_.max_payload_bytes);
    while (!writer_.AwaitQueuedWithin(backlog, absl::Milliseconds(kLaneTickMs))) {
      if (closed_.load() || stopping_.load()) return absl::UnavailableError("closed");
    }
    char head[LaneHeader::kBytes];
    absl::Status s = ReadFully(fd_, head, sizeof head, "reading a header");
    if (!s.ok()) return s;
    absl::StatusOr<LaneHeader> h = DecodeLaneHeader(head);
    if (!h.ok()) return Refuse(0, h.status());
    const absl::string_view name = LaneMethodName(h->kind);
    if (name.empty() || h->kind == static_cast<uint32_t>(LaneMethod::kHello)) {
      return Refuse(h->call_id, absl::InvalidArgumentError(absl::StrCat(
                                    "payload lane: method ", h->kind,
                                    " is not one of Push (2), Pull (3), PushPull (4)")));
    }
    const auto method = static_cast<LaneMethod>(h->kind);
    const int64_t bound =
        method == LaneMethod::kPull ? options_.max_pull_bytes : options_.max_payload_bytes;
    if (h->body_bytes > static_cast<uint64_t>(bound)) {
      return Refuse(h->call_id,
                    absl::ResourceExhaustedError(absl::StrCat(
                        name, ": the request has ", h->body_bytes,
                        " bytes, over the message limit of ", bound, " (--max_message_mb)")));
    }
    if (h->aux == 0) {
      return Refuse(h->call_id, absl::InvalidArgumentError(absl::StrCat(
                                    name, ": the request has no deadline, expected one")));
    }
    const int64_t bytes = static_cast<int64_t>(h->body_bytes);
    if (!budget_->Take(bytes, stopping_)) return absl::UnavailableError("stopping");
    absl::StatusOr<grpc::ByteBuffer> body =
        ReadLaneBody(fd_, h->body_bytes,
                     [budget = budget_](size_t n) { budget->Give(static_cast<int64_t>(n)); });
    if (!body.ok()) return body.status();
    const absl::Time deadline = absl::Now() + absl::Milliseconds(h->aux);
    handler_(new LaneCall(shared_from_this(), method, h->call_id, deadline, *std::move(body)));
    return absl::OkStatus();
  }

  // Answers call `id` (0: the connection) with `why`, which also closes
  // the connection: what follows on it cannot be trusted to be framed.
  absl::Status Refuse(uint64_t id, const absl::Status& why) {
    Answer(id, why, grpc::ByteBuffer());
    return why;
  }

  // Closes the socket after the writer, declared after it, has stopped.
  struct OwnedFd {
    int fd;
    ~OwnedFd() { close(fd); }
  };

  const int fd_;
  const OwnedFd owned_fd_;
  const std::string peer_;
  const LaneServerOptions& options_;
  const LaneServer::Handler& handler_;
  const std::shared_ptr<LaneBudget> budget_;
  const std::atomic<bool>& stopping_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> ended_{false};
  std::atomic<int>& authenticated_;  // the server's count
  bool counted_ = false;             // in it; the reading thread's
  LaneWriter writer_;
  std::thread reader_;
};

const std::string& LaneCall::peer() const { return connection_->peer(); }

bool LaneCall::over() const { return connection_->closed() || absl::Now() > deadline_; }

void LaneCall::Finish(const absl::Status& status) {
  connection_->Answer(id_, status, status.ok() ? std::move(response_) : grpc::ByteBuffer());
  delete this;
}

absl::StatusOr<std::unique_ptr<LaneServer>> LaneServer::Listen(const LaneServerOptions& options) {
  const std::string address = absl::StrCat(options.host, ":", options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(options.port);
  if (getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found) != 0) {
    return ListenError(address, "--payload_port");
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 128) == 0;
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) close(fd);
    return ListenError(address, "--payload_port");  // says why, and what to do
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<LaneServer>(new LaneServer(options, fd, bound_port));
}

LaneServer::LaneServer(const LaneServerOptions& options, int fd, int port)
    : options_(options),
      listen_fd_(fd),
      port_(port),
      budget_(std::make_shared<LaneBudget>(options.memory_bound)) {}

LaneServer::~LaneServer() {
  Shutdown();
  close(listen_fd_);
}

void LaneServer::Serve(Handler handler) {
  handler_ = std::move(handler);
  acceptor_ = std::thread([this] { Accept(); });
}

void LaneServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  std::list<std::shared_ptr<LaneConnection>> open;
  {
    absl::MutexLock lock(&mu_);
    open.swap(connections_);
  }
  for (const auto& c : open) c->Close();
  for (const auto& c : open) c->Join();
}

void LaneServer::Accept() {
  while (!stopping_.load()) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors or memory: connections wait in the backlog (and
      // workers' calls, past a failed connection, go through gRPC) until
      // some are freed.
      LOG_EVERY_N(ERROR, 100) << "payload lane: accept failed: " << strerror(errno)
                              << "; trying again";
      absl::SleepFor(absl::Milliseconds(kLaneTickMs));
      continue;
    }
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    bool loopback = false;
    if (from.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&from);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
      loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    } else if (from.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&from);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
      loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
    }
    TuneLaneSocket(fd);
    ApplyTcpCongestion(fd, options_.tcp_congestion, loopback);
    Take(fd, absl::StrCat("lane:", host, ":", port));
  }
}

// Keeps the connection of `fd` and starts its thread, after joining those
// of connections that ended; over max_connections it is closed at once.
void LaneServer::Take(int fd, std::string peer) {
  absl::MutexLock lock(&mu_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!(*it)->ended()) {
      ++it;
      continue;
    }
    (*it)->Join();
    it = connections_.erase(it);
  }
  // Those that said hello are bounded at their hello; the others here.
  if (static_cast<int>(connections_.size()) - authenticated_.load() >= kMaxWithoutHello) {
    LOG_EVERY_N(WARNING, 100) << "payload lane: refusing " << peer << ": " << kMaxWithoutHello
                              << " connections wait for their hello, the most";
    close(fd);
    return;
  }
  auto connection = std::make_shared<LaneConnection>(fd, std::move(peer), options_, handler_,
                                                     budget_, stopping_, authenticated_);
  connection->Start();
  connections_.push_back(std::move(connection));
}

}  // namespace psync
