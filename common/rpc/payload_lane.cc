#include "common/rpc/payload_lane.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

// Frames of at most this many pieces go out in one sendmsg.
constexpr size_t kMaxIovecs = 512;

template <typename T>
void Put(char*& out, T v) {
  std::memcpy(out, &v, sizeof v);  // little-endian hosts only (x86-64, aarch64)
  out += sizeof v;
}
template <typename T>
T Get(const char*& in) {
  T v;
  std::memcpy(&v, in, sizeof v);
  in += sizeof v;
  return v;
}

// A body read into a buffer of its own: freed, and its release told, when
// the slice's last reference goes.
struct OwnedBody {
  void* data;
  size_t bytes;
  std::function<void(size_t)> release;
};

void FreeBody(void* p) {
  auto* body = static_cast<OwnedBody*>(p);
  std::free(body->data);
  if (body->release) body->release(body->bytes);
  delete body;
}

absl::Status Unavailable(absl::string_view what, int err) {
  return absl::UnavailableError(
      absl::StrCat("payload lane: ", what, ": ", err == 0 ? "connection closed" : strerror(err)));
}

}  // namespace

absl::string_view LaneMethodName(uint32_t method) {
  switch (static_cast<LaneMethod>(method)) {
    case LaneMethod::kHello:
      return "Hello";
    case LaneMethod::kPush:
      return "Push";
    case LaneMethod::kPull:
      return "Pull";
    case LaneMethod::kPushPull:
      return "PushPull";
  }
  return "";
}

void EncodeLaneHeader(const LaneHeader& h, char out[LaneHeader::kBytes]) {
  char* p = out;
  Put(p, h.magic);
  Put(p, h.kind);
  Put(p, h.call_id);
  Put(p, h.body_bytes);
  Put(p, h.aux);
  Put(p, h.version);
}

absl::StatusOr<LaneHeader> DecodeLaneHeader(const char in[LaneHeader::kBytes]) {
  const char* p = in;
  LaneHeader h;
  h.magic = Get<uint32_t>(p);
  h.kind = Get<uint32_t>(p);
  h.call_id = Get<uint64_t>(p);
  h.body_bytes = Get<uint64_t>(p);
  h.aux = Get<uint32_t>(p);
  h.version = Get<uint32_t>(p);
  if (h.magic != LaneHeader::kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload lane: a frame starts with 0x", absl::Hex(h.magic), ", expected 0x",
                     absl::Hex(LaneHeader::kMagic), " (is this a psync payload lane?)"));
  }
  return h;
}

absl::Status ReadFully(int fd, void* buf, size_t n, absl::string_view what, const LaneTick& tick) {
  char* p = static_cast<char*>(buf);
  // Every kLaneTickMs, however the bytes come: a trickle does not stop it.
  absl::Time next_tick = absl::Now() + absl::Milliseconds(kLaneTickMs);
  while (n > 0) {
    if (tick) {
      const absl::Time now = absl::Now();
      if (now >= next_tick) {
        if (absl::Status s = tick(); !s.ok()) return s;
        next_tick = now + absl::Milliseconds(kLaneTickMs);
      }
      pollfd ready{fd, POLLIN, 0};
      const int polled =
          poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(next_tick - now)) + 1);
      if (polled == 0) continue;
      if (polled < 0 && errno != EINTR) return Unavailable(what, errno);
      if (polled < 0) continue;
    }
    const ssize_t got = recv(fd, p, n, tick ? MSG_DONTWAIT : MSG_WAITALL);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
    } else if (got == 0) {
      return Unavailable(what, 0);
    } else if (errno != EINTR && !(tick && (errno == EAGAIN || errno == EWOULDBLOCK))) {
      return Unavailable(what, errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<grpc::ByteBuffer> ReadLaneBody(int fd, size_t n, std::function<void(size_t)> release,
                                              const LaneTick& tick) {
  auto* body = new OwnedBody{std::malloc(n == 0 ? 1 : n), n, std::move(release)};
  if (body->data == nullptr) {
    FreeBody(body);
    return absl::ResourceExhaustedError(
        absl::StrCat("payload lane: cannot allocate a body of ", n, " bytes"));
  }
  // The slice owns the body from here: an error frees it with the buffer.
  grpc::Slice slice(body->data, n, FreeBody, body);
  grpc::ByteBuffer buffer(&slice, 1);
  absl::Status read = ReadFully(fd, body->data, n, "reading a body", tick);
  if (!read.ok()) return read;
  return buffer;
}

LaneFrame::LaneFrame(const LaneHeader& header, std::string msg, const grpc::ByteBuffer& payload)
    : message(std::move(msg)) {
  EncodeLaneHeader(header, head);
  if (payload.Length() > 0) payload.Dump(&body).IgnoreError();  // references, no copy
  bytes = sizeof head + message.size();  // what goes, whatever the dump gave
  for (const grpc::Slice& s : body) bytes += s.size();
}

absl::Status WriteLaneFrame(int fd, LaneFrame& frame, bool wait) {
  // The pieces not yet sent, the first maybe in part.
  std::vector<iovec> pieces;
  pieces.reserve(frame.body.size() + 2);
  size_t skip = frame.sent;
  auto add = [&](const void* data, size_t n) {
    if (skip >= n) {
      skip -= n;
      return;
    }
    pieces.push_back({const_cast<char*>(static_cast<const char*>(data)) + skip, n - skip});
    skip = 0;
  };
  add(frame.head, sizeof frame.head);
  add(frame.message.data(), frame.message.size());
  for (const grpc::Slice& s : frame.body) add(s.begin(), s.size());
  size_t next = 0;
  while (next < pieces.size()) {
    msghdr msg{};
    msg.msg_iov = &pieces[next];
    msg.msg_iovlen = std::min(pieces.size() - next, kMaxIovecs);
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (!wait && (errno == EAGAIN || errno == EWOULDBLOCK)) return absl::OkStatus();
      return Unavailable("writing a frame", errno);
    }
    frame.sent += static_cast<size_t>(sent);
    // Skips what went out, which may end inside a piece.
    size_t left = static_cast<size_t>(sent);
    while (next < pieces.size() && left >= pieces[next].iov_len) left -= pieces[next++].iov_len;
    if (left > 0) {
      pieces[next].iov_base = static_cast<char*>(pieces[next].iov_base) + left;
      pieces[next].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

void TuneLaneSocket(int fd) {
  const int one = 1, idle_s = 30, interval_s = 10, probes = 3, unacked_ms = 40000;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &unacked_ms, sizeof unacked_ms);
}

LaneWriter::LaneWriter(int fd, std::function<void(const absl::Status&)> failed)
    : fd_(fd), failed_(std::move(failed)) {}

LaneWriter::~LaneWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void LaneWriter::Send(const LaneHeader& header, std::string message, const grpc::ByteBuffer& body) {
  LaneFrame frame(header, std::move(message), body);
  {
    absl::MutexLock lock(&mu_);
    if (dropped_) return;
    if (writing_ || !queue_.empty()) {
      queued_bytes_ += frame.size();
      queue_.push_back(std::move(frame));
      return;
    }
    writing_ = true;
  }
  const absl::Status s = WriteLaneFrame(fd_, frame, /*wait=*/false);
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    // Ahead of any queued meanwhile, which came after it.
    if (s.ok() && frame.sent < frame.size() && !dropped_) {
      queued_bytes_ += frame.size() - frame.sent;
      queue_.push_front(std::move(frame));
    }
  }
  Wrote(s);
}

void LaneWriter::Drop() {
  absl::MutexLock lock(&mu_);
  dropped_ = true;
  queue_.clear();
  queued_bytes_ = 0;
}

bool LaneWriter::AwaitQueuedWithin(size_t bytes, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto within = [this, bytes]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queued_bytes_ <= bytes; };
  return mu_.AwaitWithTimeout(absl::Condition(&within), timeout);
}

void LaneWriter::Wrote(const absl::Status& s) {
  if (s.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (dropped_) return;
    dropped_ = true;
    queue_.clear();
    queued_bytes_ = 0;
  }
  failed_(s);
}

void LaneWriter::Run() {
  while (true) {
    std::optional<LaneFrame> frame;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (!queue_.empty() && !writing_) || (stopping_ && !writing_);
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, all written
      frame.emplace(std::move(queue_.front()));
      queue_.pop_front();
      queued_bytes_ -= frame->size() - frame->sent;
      writing_ = true;
    }
    const absl::Status s = WriteLaneFrame(fd_, *frame, /*wait=*/true);
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
    }
    Wrote(s);
  }
}

}  // namespace psync
