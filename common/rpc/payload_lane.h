// The payload lane: a plain TCP connection from a worker to a server that
// carries the Push, Pull and PushPull calls (their gRPC methods' very
// request and response bytes) as frames, without HTTP/2 between them and
// the socket. Everything else (registration, heartbeats, status, Join)
// stays on gRPC. A server opens one (--payload_lane) only without TLS; a
// worker uses it for a server that offered one at registration and shares
// no memory with it (docs/design.md, "The payload lane").
//
// A frame is a 32-byte LaneHeader, then `aux` bytes of error message (a
// reply's), then `body_bytes` of body. A connection opens with a kHello
// request whose body is the job's token (empty without one); the server
// answers it as call 0: OK (a welcome: calls may come) or a refusal, after
// which it closes. The hello and its answer carry the lane version each
// end speaks; a server refuses a hello of another, and a worker closes the
// lane on a welcome of another (its calls go through gRPC, which every
// build speaks). Requests are answered in any order, each by the call id
// it carried. Integers are little-endian.
#ifndef PSYNC_COMMON_RPC_PAYLOAD_LANE_H_
#define PSYNC_COMMON_RPC_PAYLOAD_LANE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"

namespace psync {

enum class LaneMethod : uint32_t { kHello = 1, kPush = 2, kPull = 3, kPushPull = 4 };
// The calls a lane carries: its methods but the hello.
inline constexpr LaneMethod kLaneCalls[] = {LaneMethod::kPush, LaneMethod::kPull,
                                            LaneMethod::kPushPull};

// The method's name, as its gRPC method and errors say it; "" for none.
absl::string_view LaneMethodName(uint32_t method);

struct LaneHeader {
  static constexpr uint32_t kMagic = 0x4c535950;  // "PYSL" read little-endian
  static constexpr size_t kBytes = 32;
  uint32_t magic = kMagic;
  uint32_t kind = 0;  // a request's LaneMethod, a reply's absl::StatusCode
  uint64_t call_id = 0;
  uint64_t body_bytes = 0;
  uint32_t aux = 0;  // a request's timeout in ms, a reply's message bytes
  // The hello's and the answers to call 0 (the welcome, a refusal): the
  // lane version the sender speaks (kLaneVersion); 0 on other frames, and
  // on every frame of the builds before versions.
  uint32_t version = 0;
};
// The version of the frames above and of the bodies they carry (the
// methods' messages, chunk fields in the order chunk_wire.h writes them).
// Raised by any change an earlier build would misread.
inline constexpr uint32_t kLaneVersion = 1;

void EncodeLaneHeader(const LaneHeader& h, char out[LaneHeader::kBytes]);
// InvalidArgument naming what is wrong if `in` is not a lane header.
absl::StatusOr<LaneHeader> DecodeLaneHeader(const char in[LaneHeader::kBytes]);

// Runs while a read waits, every kLaneTickMs: a read ends with its error.
using LaneTick = std::function<absl::Status()>;
inline constexpr int kLaneTickMs = 100;

// Reads exactly `n` bytes; Unavailable (naming `what`) if the connection
// ends or fails first. With `tick`, waits in steps of kLaneTickMs and runs
// it between them (e.g. to end calls past their deadline).
absl::Status ReadFully(int fd, void* buf, size_t n, absl::string_view what,
                       const LaneTick& tick = nullptr);

// Reads a body of `n` bytes into one buffer of its own, returned as a byte
// buffer of one slice. `release`, if set, runs when the buffer is freed
// (with `n`), wherever the slice last goes.
absl::StatusOr<grpc::ByteBuffer> ReadLaneBody(int fd, size_t n,
                                              std::function<void(size_t)> release = nullptr,
                                              const LaneTick& tick = nullptr);

// One frame on its way out: its pieces, and how much of them has gone.
struct LaneFrame {
  LaneFrame(const LaneHeader& header, std::string message, const grpc::ByteBuffer& body);
  size_t size() const { return bytes; }

  char head[LaneHeader::kBytes];
  std::string message;
  std::vector<grpc::Slice> body;  // references to the body's slices
  size_t bytes = 0;               // of the whole frame
  size_t sent = 0;
};

// Writes what is left of `frame`: all of it (`wait`), or what the socket
// takes without blocking. Unavailable if the connection fails.
absl::Status WriteLaneFrame(int fd, LaneFrame& frame, bool wait);

// Sets what every lane socket has: no Nagle delay, and keepalive probes
// and a bound on unacknowledged data that find a vanished peer (as gRPC's
// keepalive pings do): a read or write on its connection then fails.
void TuneLaneSocket(int fd);

// Frames going out on one connection, in order. A frame sent while none
// is queued is written at once on the sender's thread as far as the socket
// takes it without blocking (no hand-over between threads, which on busy
// cores costs the pipeline its pace); what is left goes from a thread of
// the writer's, so that a sender never waits for the socket. After a write
// fails, `failed` is told once and later frames are dropped.
class LaneWriter {
 public:
  LaneWriter(int fd, std::function<void(const absl::Status&)> failed);
  // Writes what is queued, then stops.
  ~LaneWriter();

  LaneWriter(const LaneWriter&) = delete;
  LaneWriter& operator=(const LaneWriter&) = delete;

  void Send(const LaneHeader& header, std::string message, const grpc::ByteBuffer& body);
  // Drops what is queued and stops writing (the connection is going).
  void Drop();
  // Waits while more than `bytes` are queued, up to `timeout`; whether
  // they are within it now.
  bool AwaitQueuedWithin(size_t bytes, absl::Duration timeout);

 private:
  void Run();
  // A write of a frame ended with `s`: on failure drops the rest and tells.
  void Wrote(const absl::Status& s);

  const int fd_;
  const std::function<void(const absl::Status&)> failed_;
  absl::Mutex mu_;
  std::deque<LaneFrame> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a thread is writing a frame
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool dropped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_{[this] { Run(); }};
};

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_PAYLOAD_LANE_H_
