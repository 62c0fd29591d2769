// The settings of a GrpcPsClient, which its pieces (sessions, call engine,
// payload coding) read: plain values, copied from flags by main.cc.
#ifndef PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_OPTIONS_H_
#define PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/config/init_source.h"
#include "common/config/training_shape.h"
#include "common/model/tensor.h"
#include "common/rpc/tcp_congestion.h"
#include "common/security/security.h"
#include "common/wire/wire_dtype.h"
#include "worker/trace.h"

namespace psync {

struct GrpcPsClientOptions {
  std::vector<std::string> server_addresses;  // by server rank
  int worker_rank = 0;
  int num_workers = 1;
  // This worker's share of a step against the others' (the sum of its
  // device weights).
  double worker_weight = 1;
  // Deadline of one call. A pull waits for the slowest worker, so this bounds
  // how long a worker waits for its peers.
  absl::Duration call_timeout = absl::Seconds(120);
  // How long Register keeps retrying servers that are not up (or not ready:
  // recovering, or still holding a dead predecessor's lease on this rank).
  absl::Duration connect_timeout = absl::Seconds(60);
  // How long Finish waits for the other workers.
  absl::Duration finish_timeout = absl::Seconds(120);
  // Liveness signal to every server, from a thread of the client's.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // Every worker of a job has the same; the servers refuse another.
  TrainingShape shape;
  // UpdateRuleOf the job; a server with other settings refuses it. Empty:
  // not checked.
  std::string update_rule;
  // Where the job's initial weights come from (InitSourceOf); a server
  // configured otherwise refuses the worker. nullopt: not said (tools).
  std::optional<InitSource> init_from;
  // The tensors this worker holds besides the layout's and never sends, by
  // digest (a torch model's frozen parameters); a server refuses a worker
  // whose differ from the job's. nullopt: not said (tools).
  std::optional<std::vector<TensorDigest>> frozen;
  // BlasInfo::Kernels() of this worker; servers in deterministic mode warn
  // when workers differ. Empty: not said.
  std::string blas_kernels;
  // A push-pull to one server is split into requests of about this many
  // payload bytes (whole chunks; a chunk larger than this goes alone), all
  // in flight at once: the server applies each request's chunks as soon as
  // every worker's copy is in, and answers with their new weights while
  // later requests still arrive (within push_window_bytes). On one host
  // a server's share is cut into at most 64 requests (larger ones when it
  // holds more than that many times this): on 2 cores, 16 MiB in 1 MiB
  // requests took about 0.8 times as long as in one, and a 256 MiB share
  // in 256 requests 1.1-1.3x as long as in 64 (docs/performance.md).
  // Where payloads cross a network (a server whose address is not
  // loopback, and no shared memory with it) a share is cut into at least
  // 256 requests (of a chunk at least): the link then bounds the step, and
  // the pipeline fills and drains a request's worth of every link, so the
  // step is about 1/R of the share longer than the link's bound for R
  // requests, and larger requests from several workers overflow the queue
  // of a server's link (4 emulated hosts, 64 MiB, co-located: 16 requests
  // 1.15-1.23x the bound, 64 1.07-1.09x; 256 MiB: 64 requests of 1 MiB,
  // 3 MiB in flight to a server's 625 KB queue, 1.12-1.18x, 256 of a
  // chunk 1.06-1.07x). Everywhere at most 2048 / num_workers requests within
  // 32..256 (MaxRequestsPerServer, worker/client/request_plan.h), so that
  // a push-pull's waiting calls stay within the servers' bounds
  // (--max_waiting_calls).
  int64_t max_request_bytes = 1 << 20;
  // The same for a server that shares memory with this worker
  // (shared_memory): requests then carry no payload bytes, and fewer,
  // larger ones cost less CPU. On 2 cores, 16 MiB in 2 MiB requests took
  // 11.0-12.6 ms of CPU a step against 12.5-13.7 in 1 MiB ones (five
  // interleaved rounds; the step times overlapped within the machine's
  // noise), and 4 MiB requests fill and drain the pipeline slower.
  int64_t shared_request_bytes = 2 << 20;
  // Bounds a server's receive buffers. Where a server's share is larger
  // than this window, at most this many payload bytes (one request at
  // least) of a push-pull are in flight to it; with more than one worker
  // each request goes as a Push followed by a Pull of its chunks once the
  // server holds them. Otherwise all requests are in flight at once. 0
  // means max(ceil(2 / num_workers) requests, share / (2 * num_workers^2)):
  // all workers together send a server at most share / (2 * num_workers)
  // at a time, two requests at least; a share of one chunk's bytes or less
  // is not windowed (a server holding one chunk takes that much from each
  // worker at once anyway). The more workers, the less each
  // needs in flight to keep the server busy (measured, 64 MiB, 4 workers x
  // 1 server, momentum 0.9: a 2 MiB window per worker peaked at 229 MiB
  // server RSS against 281 MiB with 8 MiB, the step no slower). Where
  // payloads cross a network, 0 means ceil(2 / num_workers) requests
  // whatever the share: every worker's bytes in flight to a server wait in
  // the queue of its link, and more of them than the queue holds are lost
  // and resent, unevenly between the flows, so some finish late (4
  // emulated hosts, 64 MiB, 1 Gbit/s, in 64 requests: one in flight
  // 1.07-1.09x the link's bound, the share-based window 1.07-1.21x).
  int64_t push_window_bytes = 0;
  // How gradients and weights travel (--wire_dtype): a 2-byte dtype halves
  // the bytes of a step; the servers keep float32 master weights.
  WireDType wire_dtype = WireDType::kFloat32;
  // Offer each server a region of shared memory at registration (common/
  // shared_region.h): a server on this host maps it, and push-pulls then
  // carry their payloads there instead of in the messages. A server that
  // cannot (another host, or --shared_memory=false there) says why, and
  // payloads travel in the messages. Also keeps the model in shared memory
  // (PsClient::shared_model), which such servers read and write in place.
  bool shared_memory = true;
  // TLS and the token on every call (see common/security/security.h).
  PeerSecurity security;
  // Congestion control of the connections to the servers (--tcp_congestion).
  TcpCongestion tcp_congestion;
  // If set, each push-pull call to a server is recorded (not owned).
  Tracer* tracer = nullptr;
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_GRPC_PS_CLIENT_OPTIONS_H_
