// The state of one exchange of chunks with one server (a ChunkCall), which
// the GrpcPsClient fills, the ChunkCallEngine drives and the PayloadCoder
// reads and writes the messages of.
#ifndef PSYNC_WORKER_CLIENT_RPC_CHUNK_CALL_H_
#define PSYNC_WORKER_CLIENT_RPC_CHUNK_CALL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace psync {

inline constexpr char kPushMethod[] = "/psync.proto.ParameterServer/Push";
inline constexpr char kPullMethod[] = "/psync.proto.ParameterServer/Pull";
inline constexpr char kPushPullMethod[] = "/psync.proto.ParameterServer/PushPull";

// One exchange of chunks with one server, driven by the client's
// completion queue, each RPC retried on Retryable() errors until the
// deadline (every psync call is idempotent, so retrying is safe): a Pull, a
// PushPull, or a windowed push-pull, which is a Push (acknowledged once the
// server holds the gradients) followed by a Pull of the same chunks.
//
// Not thread-safe: touched by the thread that drives its queue, and by
// others only under the ChunkCallEngine's lock (see the fields).
struct ChunkCall {
  int server = 0;
  const char* op = "";      // for messages
  const char* method = "";  // full gRPC method name of the current RPC
  int64_t version = 0;      // expected in the response
  std::vector<int32_t> chunk_ids;
  float* weights = nullptr;
  absl::Time deadline;
  absl::Time launched;  // for the trace
  bool push_pull = false;  // records into the trace
  grpc::CompletionQueue* cq = nullptr;  // whose thread drives this call
  // Built once; for a push its payload slices point at the caller's
  // gradients, which stay valid until Wait() returns. A push to a server
  // that shares memory is built when first issued (from `grads`), in a
  // free slot of the region when there is one.
  grpc::ByteBuffer request;
  const float* grads = nullptr;  // until the push is built
  int64_t step = 0, sample_count = 0;
  int64_t payload_bytes = 0;  // of a push, in the wire dtype
  // Whether the payloads are in place in the worker's shared model
  // (SharedPayloadMemory): the request carries none, and the weights come
  // back there.
  bool in_model = false;
  // The shared slot the call holds; 0: none. A retry sends the slot again,
  // which may hold the new weights by then (an answer lost with its
  // connection): harmless, as the server then holds the push and ignores
  // its repeat, whatever it carries.
  uint32_t slot = 0;
  // Why the call failed before reaching the server (a gradient its dtype
  // cannot hold).
  absl::Status local_error;
  // A windowed push-pull: the Push's payload bytes, counted in the server's
  // window until the Push ends (0 otherwise); a Pull follows it. The
  // window holds at most `window_limit` bytes (one call at least).
  int64_t window_bytes = 0;
  int64_t window_limit = 0;
  // Payloads in shared slots: the Pull goes once the Push has ended, in
  // this same call (it answers in the Push's slot).
  bool then_pull = false;
  // Payloads in the messages: the Pull is a call of its own, `pull`, issued
  // right behind the Push's first attempt, so that it reaches the server
  // while the Push's bytes still arrive, not behind the window's later
  // Pushes; it ends unsent or cancelled (`abandoned`) if the Push fails.
  ChunkCall* pull = nullptr;  // owned by the engine, as this call is
  bool pull_issued = false;
  bool abandoned = false;  // by the thread that drives the queue

  // Per attempt. `ctx` is replaced under the ChunkCallEngine's lock, which
  // Cancel() holds to reach it from another thread; null for an attempt on
  // the server's payload lane, whose call id is `lane_call` (0: none yet).
  std::unique_ptr<grpc::ClientContext> ctx;
  uint64_t lane_call = 0;
  std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
  grpc::ByteBuffer response;
  grpc::Status status;

  // Completion-queue tags: the RPC finished, or it is time to (re)issue it
  // from the poller thread (after a retry backoff, or at once when the
  // caller should not spend its own time starting the call).
  struct Tag {
    ChunkCall* call;
    bool issue;
  };
  Tag done_tag{this, false}, issue_tag{this, true};
  grpc::Alarm issue_alarm;
  grpc::Alarm lane_alarm;  // posts the end of an attempt on the lane
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_CHUNK_CALL_H_
