#include "worker/client/rpc/lane_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/same_host.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {
namespace {

// How long a connection attempt may take, and how long after a failed one
// the lane stays closed (its calls go through gRPC meanwhile).
constexpr absl::Duration kConnectTimeout = absl::Seconds(3);
constexpr absl::Duration kLaneClosedAfterFailure = absl::Seconds(5);
// An answer's error message, at most.
constexpr uint32_t kMaxMessage = 1 << 16;

grpc::Status GrpcStatus(absl::StatusCode code, absl::string_view message) {
  return ToGrpcStatus(absl::Status(code, message));
}

grpc::Status Cancelled() { return GrpcStatus(absl::StatusCode::kCancelled, "cancelled"); }

}  // namespace

LaneClient::Connection::Connection(int fd, uint64_t number)
    : fd(fd), number(number), writer(std::make_unique<LaneWriter>(fd, [fd](const absl::Status&) {
        shutdown(fd, SHUT_RDWR);  // the reader then ends the connection's calls
      })) {}

LaneClient::Connection::~Connection() {
  shutdown(fd, SHUT_RDWR);
  writer.reset();
  close(fd);
}

LaneClient::LaneClient(std::string host, std::string token, TcpCongestion tcp_congestion,
                       std::string who)
    : host_(std::move(host)),
      token_(std::move(token)),
      tcp_congestion_(std::move(tcp_congestion)),
      who_(std::move(who)) {}

LaneClient::~LaneClient() {
  std::shared_ptr<Connection> open;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (connection_ != nullptr) shutdown(connection_->fd, SHUT_RDWR);
  }
  connector_.join();
  {
    absl::MutexLock lock(&mu_);
    open = std::move(connection_);
  }
  if (open != nullptr) retired_.push_back(std::move(open));
  for (const auto& c : retired_) {
    shutdown(c->fd, SHUT_RDWR);
    if (c->reader.joinable()) c->reader.join();
  }
  retired_.clear();
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, p] : pending_) ids.push_back(id);
  }
  for (uint64_t id : ids) End(id, Cancelled());
}

void LaneClient::SetPort(int port, int64_t max_reply_bytes) {
  absl::MutexLock lock(&mu_);
  max_reply_bytes_ = max_reply_bytes;
  if (port == port_) return;
  port_ = port;
  closed_until_ = absl::InfinitePast();
  // Its reader ends it; the next call connects to the new port.
  if (connection_ != nullptr) shutdown(connection_->fd, SHUT_RDWR);
}

bool LaneClient::open() const {
  absl::MutexLock lock(&mu_);
  return port_ != 0 && absl::Now() >= closed_until_;
}

uint64_t LaneClient::Start(LaneMethod method, const grpc::ByteBuffer& request, absl::Time deadline,
                           Ending ending, std::vector<AnswerPlace> places) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  pending_[id] = Pending{std::move(ending), method, request, deadline, std::move(places)};
  return id;
}

void LaneClient::Send(uint64_t id) {
  std::shared_ptr<Connection> c;
  {
    absl::MutexLock lock(&mu_);
    if (!pending_.contains(id)) return;
    c = connection_;
    if (c == nullptr || c->ended) {
      waiting_.push_back(id);  // wakes the connecting thread
      return;
    }
  }
  if (!SendOn(c, id)) {
    absl::MutexLock lock(&mu_);
    waiting_.push_back(id);
  }
}

bool LaneClient::SendOn(const std::shared_ptr<Connection>& c, uint64_t id) {
  LaneHeader h;
  grpc::ByteBuffer request;
  {
    absl::MutexLock lock(&mu_);
    // Its calls have been ended: one sent on it now would never be.
    if (c->ended) return false;
    auto it = pending_.find(id);
    if (it == pending_.end()) return true;  // ended meanwhile
    Pending& p = it->second;
    p.connection = c->number;
    h.kind = static_cast<uint32_t>(p.method);
    h.call_id = id;
    h.body_bytes = p.request.Length();
    const int64_t ms = absl::ToInt64Milliseconds(p.deadline - absl::Now());
    h.aux = static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, std::numeric_limits<uint32_t>::max()));
    request = p.request;
  }
  c->writer->Send(h, "", request);
  return true;
}

void LaneClient::Connect() {
  bool warned = false;  // of failed attempts, since the last connection
  while (true) {
    std::vector<uint64_t> ids;
    std::shared_ptr<Connection> c;
    int port = 0;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !waiting_.empty(); };
      mu_.Await(absl::Condition(&work));
      if (stopping_) return;
      if (absl::Now() < closed_until_) {
        ids.swap(waiting_);  // the lane is closed: they go through gRPC
      } else if (connection_ != nullptr && !connection_->ended) {
        c = connection_;  // another call's connection came first
        ids.swap(waiting_);
      } else {
        if (connection_ != nullptr) retired_.push_back(std::move(connection_));
        port = port_;
      }
    }
    if (c == nullptr && !ids.empty()) {
      for (uint64_t id : ids) {
        End(id, GrpcStatus(absl::StatusCode::kUnavailable,
                           absl::StrCat("payload lane of ", who_, ": closed for now")));
      }
      continue;
    }
    if (c == nullptr) {
      for (const auto& r : retired_) {
        shutdown(r->fd, SHUT_RDWR);
        if (r->reader.joinable()) r->reader.join();  // it ended that connection's calls
      }
      retired_.clear();
      absl::Status why;
      const int fd = Open(port, &why);
      {
        absl::MutexLock lock(&mu_);
        if (fd >= 0) {
          connection_ = c = std::make_shared<Connection>(fd, ++connections_);
          c->reader = std::thread([this, raw = c.get()] { Read(raw); });
        } else {
          closed_until_ = absl::Now() + kLaneClosedAfterFailure;
        }
        ids.swap(waiting_);
      }
      if (fd < 0) {
        if (!warned) {
          LOG(WARNING) << why.message() << "; its calls go through gRPC for "
                       << absl::FormatDuration(kLaneClosedAfterFailure) << ", then it tries again";
        }
        warned = true;
        for (uint64_t id : ids) End(id, GrpcStatus(why.code(), why.message()));
        continue;
      }
      warned = false;
    }
    for (uint64_t id : ids) {
      if (!SendOn(c, id)) {
        absl::MutexLock lock(&mu_);
        waiting_.push_back(id);
      }
    }
  }
}

int LaneClient::Open(int port, absl::Status* why) {
  const std::string where = absl::StrCat(host_, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int err = getaddrinfo(host_.c_str(), service.c_str(), &hints, &found); err != 0) {
    *why = absl::UnavailableError(absl::StrCat("payload lane of ", who_, ": cannot resolve ", host_,
                                               ": ", gai_strerror(err)));
    return -1;
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval timeout = absl::ToTimeval(kConnectTimeout);
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    *why = absl::UnavailableError(
        absl::StrCat("payload lane of ", who_, ": cannot connect to ", where, ": ", strerror(err)));
    return -1;
  }
  timeout = timeval{};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  TuneLaneSocket(fd);
  ApplyTcpCongestion(fd, tcp_congestion_, IsLoopbackHost(host_));
  LaneHeader hello;
  hello.kind = static_cast<uint32_t>(LaneMethod::kHello);
  hello.body_bytes = token_.size();
  hello.version = kLaneVersion;
  grpc::Slice token(token_);
  LaneFrame frame(hello, "", grpc::ByteBuffer(&token, 1));
  absl::Status s = WriteLaneFrame(fd, frame, /*wait=*/true);
  // The server's welcome (an OK answer to call 0), in time: a server that
  // cannot take the connection (out of descriptors, its backlog holding
  // it) or refuses it closes the lane rather than leave calls unanswered.
  const absl::Time until = absl::Now() + kConnectTimeout;
  const LaneTick in_time = [until] {
    return absl::Now() < until ? absl::OkStatus()
                               : absl::UnavailableError("no welcome from the server in time");
  };
  char head[LaneHeader::kBytes] = {};
  if (s.ok()) s = ReadFully(fd, head, sizeof head, "waiting for the welcome", in_time);
  absl::StatusOr<LaneHeader> welcome = DecodeLaneHeader(head);
  if (s.ok() && !welcome.ok()) s = welcome.status();
  if (s.ok() && (welcome->call_id != 0 || welcome->body_bytes != 0 ||
                 welcome->kind > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
                 welcome->aux > kMaxMessage)) {
    s = absl::UnavailableError("the server's first frame is not a welcome");
  }
  if (s.ok() && welcome->kind != 0) {  // a refusal, and its message
    std::string message(welcome->aux, '\0');
    s = ReadFully(fd, message.data(), message.size(), "reading a refusal", in_time);
    if (s.ok()) s = absl::Status(static_cast<absl::StatusCode>(welcome->kind), message);
  }
  if (s.ok() && welcome->version != kLaneVersion) {
    s = absl::FailedPreconditionError(absl::StrCat(
        "the server speaks lane version ", welcome->version,
        welcome->version == 0 ? " (a build before versions)" : "", ", this worker ", kLaneVersion,
        ": run one psync build on the job's workers and servers"));
  }
  if (!s.ok()) {
    close(fd);
    *why = absl::Status(
        s.code() == absl::StatusCode::kUnauthenticated ? s.code() : absl::StatusCode::kUnavailable,
        absl::StrCat("payload lane of ", who_, " at ", where, ": ", s.message()));
    return -1;
  }
  return fd;
}

void LaneClient::Read(Connection* c) {
  absl::Status ended;
  bool refused = false;
  // Deadlines are looked at every kLaneTickMs, not at every answer: the
  // look walks every call in flight.
  absl::Time next_look = absl::InfinitePast();
  while (ended.ok()) {
    pollfd p{c->fd, POLLIN, 0};
    const int ready = poll(&p, 1, kLaneTickMs);
    const int err = errno;
    if (const absl::Time now = absl::Now(); now >= next_look) {
      ExpireDeadlines();
      next_look = now + absl::Milliseconds(kLaneTickMs);
    }
    if (ready > 0) ended = ReadAnswer(c->fd, &refused);
    if (ready < 0 && err != EINTR) ended = absl::UnavailableError(strerror(err));
  }
  shutdown(c->fd, SHUT_RDWR);  // the writer stops too
  {
    absl::MutexLock lock(&mu_);
    c->ended = true;
    // Refused (a frame of this worker's it could not read): the calls go
    // through gRPC for a while. A server that cannot take a connection
    // says so before its welcome (Open).
    if (refused) closed_until_ = absl::Now() + kLaneClosedAfterFailure;
  }
  const absl::StatusCode code =
      absl::IsInvalidArgument(ended) ? absl::StatusCode::kUnavailable : ended.code();
  EndAll(c->number,
         GrpcStatus(code, absl::StrCat("payload lane of ", who_, ": ", ended.message())));
}

void LaneClient::Cancel(uint64_t id) { End(id, Cancelled()); }

bool LaneClient::End(uint64_t id, const grpc::Status& status, grpc::ByteBuffer* response) {
  Ending ending;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return false;
    const uint64_t sent_on = it->second.connection;
    // Its answer is being read into the caller's memory on another thread
    // (the reader's own end of the call stops that read at its next look).
    const bool placing_elsewhere = placing_ == id && std::this_thread::get_id() != placing_thread_;
    // Unanswered, or refused (maybe before the server read its body), its
    // frame may still be going out from the caller's buffers; placing, its
    // answer is still coming in.
    if ((response == nullptr || !status.ok() || placing_elsewhere) && sent_on != 0 &&
        connection_ != nullptr && connection_->number == sent_on) {
      shutdown(connection_->fd, SHUT_RDWR);
    }
    if (placing_elsewhere) {  // the call ends once that read has stopped
      auto read_ended = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return placing_ != id; };
      mu_.Await(absl::Condition(&read_ended));
      it = pending_.find(id);
      if (it == pending_.end()) return false;  // the reader ended it meanwhile
    }
    ending = std::move(it->second.ending);
    pending_.erase(it);
  }
  if (response != nullptr && status.ok()) *ending.response = std::move(*response);
  *ending.status = status;
  ending.done();
  return true;
}

void LaneClient::EndAll(uint64_t connection, const grpc::Status& status) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, p] : pending_) {
      if (p.connection == connection) ids.push_back(id);
    }
  }
  for (uint64_t id : ids) End(id, status);
}

void LaneClient::ExpireDeadlines() {
  std::vector<uint64_t> ids;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, p] : pending_) {
      if (p.deadline <= now) ids.push_back(id);
    }
  }
  for (uint64_t id : ids) {
    End(id, GrpcStatus(absl::StatusCode::kDeadlineExceeded, "payload lane: deadline exceeded"));
  }
}

absl::Status LaneClient::ReadAnswer(int fd, bool* refused) {
  // A server that stops inside an answer does not keep the deadlines from
  // ending calls.
  const LaneTick tick = [this] {
    ExpireDeadlines();
    return absl::OkStatus();
  };
  char head[LaneHeader::kBytes];
  PSYNC_RETURN_IF_ERROR(ReadFully(fd, head, sizeof head, "reading an answer", tick));
  absl::StatusOr<LaneHeader> h = DecodeLaneHeader(head);
  if (!h.ok()) return h.status();
  int64_t max_body;
  {
    absl::MutexLock lock(&mu_);
    max_body = max_reply_bytes_;
  }
  if (h->aux > kMaxMessage || h->body_bytes > static_cast<uint64_t>(max_body) ||
      h->kind > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an answer with code ", h->kind, ", ", h->aux, " bytes of message and ", h->body_bytes,
        " of body, expected a code up to 16, at most ", kMaxMessage, " and ", max_body));
  }
  std::string message(h->aux, '\0');
  PSYNC_RETURN_IF_ERROR(ReadFully(fd, message.data(), message.size(), "reading an answer", tick));
  const auto code = static_cast<absl::StatusCode>(h->kind);
  absl::StatusOr<grpc::ByteBuffer> body =
      code == absl::StatusCode::kOk && h->call_id != 0
          ? ReadBody(fd, h->call_id, h->body_bytes, tick)
          : ReadLaneBody(fd, h->body_bytes, nullptr, tick);
  if (!body.ok()) return body.status();
  if (h->call_id == 0) {  // the server refused the connection
    *refused = true;
    return absl::Status(code, message);
  }
  End(h->call_id, GrpcStatus(code, message), &*body);
  return absl::OkStatus();
}

absl::StatusOr<grpc::ByteBuffer> LaneClient::ReadBody(int fd, uint64_t id, size_t n,
                                                      const LaneTick& tick) {
  // Taken out: the call may end, and its Pending go, while its answer is
  // read (a retry starts the call again, with places of its own).
  std::vector<AnswerPlace> places;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it != pending_.end() && !it->second.places.empty()) {
      places = std::move(it->second.places);
      placing_ = id;
      placing_thread_ = std::this_thread::get_id();
    }
  }
  // Ended, or nothing to place. Not under mu_: `tick` takes it.
  if (places.empty()) return ReadLaneBody(fd, n, nullptr, tick);
  // The read stops once the call has ended (past its deadline, ended by
  // `tick` on this thread): its memory is the caller's again. The
  // connection's other calls are then retried, as after any lost one.
  const LaneTick placing_tick = [this, id, &tick]() -> absl::Status {
    PSYNC_RETURN_IF_ERROR(tick());
    absl::MutexLock lock(&mu_);
    return pending_.contains(id)
               ? absl::OkStatus()
               : absl::UnavailableError("a call ended while its answer was read into place");
  };
  absl::StatusOr<grpc::ByteBuffer> body = ReadPlacedBody(fd, n, places, placing_tick);
  absl::MutexLock lock(&mu_);
  placing_ = 0;
  return body;
}

}  // namespace psync
