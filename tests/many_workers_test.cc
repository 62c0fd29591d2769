// The asynchronous server under many connections: 256 workers train
// against one server (a waiting pull holds no thread), and pulls that flood
// the server are bounded per connection and in total with
// RESOURCE_EXHAUSTED, which the job's own clients retry until the flood has
// gone, so that training finishes.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/layout.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "common/rpc/channel.h"
#include "common/wire/layout_proto.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"
#include "tests/test_util.h"
#include "worker/client/rpc/grpc_ps_client.h"

namespace psync {
namespace {

constexpr float kLr = 0.001f;

// One psync_server process for `workers` workers, plain SGD at kLr.
class ServerProcess {
 public:
  ServerProcess(int workers, const std::vector<std::string>& extra) {
    PortReservation reservation;
    auto port = reservation.Add();
    EXPECT_TRUE(port.ok()) << port.status();
    if (!port.ok()) return;  // no process: the test fails, without a crash
    reservation.Release();
    address_ = absl::StrCat("127.0.0.1:", *port);
    std::vector<std::string> argv = {
        Runfile("server/psync_server"), "--num_servers=1", "--server_rank=0",
        absl::StrCat("--num_workers=", workers), absl::StrCat("--lr=", kLr), "--momentum=0",
        absl::StrCat("--port=", *port), "--servers=" + address_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = StartProcess(argv, "server");
    EXPECT_TRUE(process_ != nullptr &&
                WaitForOutput(*process_, "listening on", absl::Now() + absl::Seconds(30)));
  }
  ~ServerProcess() {
    if (process_ != nullptr) {
      EXPECT_EQ(process_->Stop(absl::Seconds(10)), 0);
    }
  }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::unique_ptr<Subprocess> process_;
};

Layout TinyLayout() { return *Layout::Create({{"w", {16}}, {"b", {4}}}, 4096, 1, 7); }

// Worker `rank` pushes a gradient of rank + 1 for every weight, over one
// sample, at each of `steps` steps; returns the weights it ends with, and
// those it started from in `initial`.
absl::StatusOr<std::vector<float>> Train(const std::string& address, int rank, int workers,
                                         int steps, std::vector<float>* initial) {
  const Layout layout = TinyLayout();
  GrpcPsClientOptions options;
  options.server_addresses = {address};
  options.worker_rank = rank;
  options.num_workers = workers;
  options.call_timeout = absl::Seconds(60);
  options.shape.devices = 1;
  options.shape.batch_per_device = 1;
  options.shape.total_steps = steps;
  options.shape.train_samples = workers * steps;
  auto client = CreateGrpcPsClient(layout, options);
  if (!client.ok()) return client.status();
  auto version = (*client)->Register();
  if (!version.ok()) return version.status();
  const int64_t n = layout.total_elements();
  std::vector<float> weights(n), grads(n, static_cast<float>(rank + 1));
  absl::Status s = (*client)->Pull(0, PullPrecision::kWire, weights.data());
  if (!s.ok()) return s;
  *initial = weights;
  for (int step = 0; step < steps; ++step) {
    s = (*client)->PushPull(step, 1, grads.data(), weights.data());
    if (!s.ok()) return s;
  }
  s = (*client)->Finish(steps);
  if (!s.ok()) return s;
  return weights;
}

// Every worker ends with w0 - steps * kLr * mean(rank + 1).
void ExpectTrained(const std::vector<absl::StatusOr<std::vector<float>>>& results,
                   const std::vector<float>& initial, int steps) {
  const int workers = static_cast<int>(results.size());
  const double mean = (workers + 1) / 2.0;
  for (int w = 0; w < workers; ++w) {
    ASSERT_TRUE(results[w].ok()) << "worker " << w << ": " << results[w].status();
    for (size_t i = 0; i < initial.size(); ++i) {
      ASSERT_NEAR((*results[w])[i], initial[i] - steps * kLr * mean, 1e-4)
          << "worker " << w << ", weight " << i;
    }
  }
}

TEST(ManyWorkersTest, TwoHundredFiftySixWorkersTrainAgainstOneServer) {
  constexpr int kWorkers = 256, kSteps = 5;
  ServerProcess server(kWorkers, {});
  std::vector<absl::StatusOr<std::vector<float>>> results(kWorkers);
  std::vector<std::vector<float>> initial(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      results[w] = Train(server.address(), w, kWorkers, kSteps, &initial[w]);
    });
  }
  for (std::thread& t : threads) t.join();
  ExpectTrained(results, initial[0], kSteps);
}

// A channel with a connection of its own.
std::unique_ptr<proto::ParameterServer::Stub> NewStub(const std::string& address) {
  return proto::ParameterServer::NewStub(
      CreatePeerChannel(address, PeerSecurity{}, PeerChannelArguments()));
}

struct FloodResult {
  int exhausted = 0;  // RESOURCE_EXHAUSTED
  int waited = 0;     // admitted: ended otherwise, after waiting
  std::string message;  // of the first RESOURCE_EXHAUSTED
};

// `n` pulls of version 1 from worker 1's session on one connection, each
// with `deadline`; returns once all have ended. Counts each refusal in
// `refused` (if given) as it comes.
FloodResult Flood(const std::string& address, uint64_t session, int n, absl::Time deadline,
                  std::atomic<int>* refused = nullptr) {
  auto stub = NewStub(address);
  grpc::CompletionQueue cq;
  struct Call {
    grpc::ClientContext ctx;
    proto::PullResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<proto::PullResponse>> reader;
  };
  std::vector<Call> calls(n);
  proto::PullRequest req;
  req.set_worker_rank(1);
  req.set_layout_fingerprint(TinyLayout().fingerprint());
  req.set_version(1);
  req.set_session(session);
  req.add_chunk_ids(0);
  for (Call& call : calls) {
    call.ctx.set_deadline(absl::ToChronoTime(deadline));
    call.reader = stub->AsyncPull(&call.ctx, req, &cq);
    call.reader->Finish(&call.response, &call.status, &call);
  }
  FloodResult result;
  for (int i = 0; i < n; ++i) {
    void* tag;
    bool ok;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    const Call& call = *static_cast<Call*>(tag);
    if (call.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      if (result.exhausted++ == 0) result.message = call.status.error_message();
      if (refused != nullptr) ++*refused;
    } else {
      ++result.waited;
    }
  }
  cq.Shutdown();
  return result;
}

TEST(ManyWorkersTest, AFloodOfPullsIsBoundedPerConnectionAndInTotalAndTrainingFinishes) {
  constexpr int kPerConnection = 8, kTotal = 28, kSteps = 3;
  ServerProcess server(2, {absl::StrCat("--max_waiting_per_connection=", kPerConnection),
                           absl::StrCat("--max_waiting_calls=", kTotal)});
  // The flooder holds worker 1's rank (so its pulls pass the session check
  // and wait) and then falls silent, so that the real worker 1 takes over.
  proto::RegisterRequest reg;
  reg.set_worker_rank(1);
  reg.set_num_workers(2);
  const Layout layout = TinyLayout();
  LayoutToProto(layout, reg.mutable_layout());
  reg.set_layout_fingerprint(layout.fingerprint());
  reg.set_worker_incarnation(77);
  reg.mutable_shape()->set_devices(1);
  reg.mutable_shape()->set_batch_per_device(1);
  reg.mutable_shape()->set_total_steps(kSteps);
  reg.mutable_shape()->set_train_samples(2 * kSteps);
  proto::RegisterResponse registered;
  auto stub = NewStub(server.address());
  grpc::Status st;
  for (const absl::Time until = absl::Now() + absl::Seconds(20); absl::Now() < until;) {
    grpc::ClientContext ctx;
    st = stub->Register(&ctx, reg, &registered);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;  // not ready yet
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(st.ok()) << st.error_message();

  // Three connections take 8 places each; a fourth takes the last 4.
  const absl::Time flood_deadline = absl::Now() + absl::Seconds(4);
  std::vector<FloodResult> floods(4);
  std::vector<std::thread> flooders;
  std::atomic<int> refused{0};
  for (int c = 0; c < 3; ++c) {
    flooders.emplace_back([&, c] {
      floods[c] = Flood(server.address(), registered.session(), 40, flood_deadline, &refused);
    });
  }
  // Once the three have had their refusals, their admitted pulls wait.
  while (refused.load() < 3 * (40 - kPerConnection) && absl::Now() < flood_deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  floods[3] = Flood(server.address(), registered.session(), 40, flood_deadline);
  EXPECT_EQ(floods[3].exhausted, 40 - (kTotal - 3 * kPerConnection));
  EXPECT_TRUE(Contains(floods[3].message, "--max_waiting_calls")) << floods[3].message;

  // Meanwhile the job's two workers start; their push-pulls are refused
  // while the flood holds every place, and retried until it has gone.
  std::vector<absl::StatusOr<std::vector<float>>> results(2);
  std::vector<std::vector<float>> initial(2);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] { results[w] = Train(server.address(), w, 2, kSteps, &initial[w]); });
  }
  for (std::thread& t : flooders) t.join();
  for (std::thread& t : workers) t.join();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(floods[c].waited, kPerConnection) << "connection " << c;
    EXPECT_EQ(floods[c].exhausted, 40 - kPerConnection) << "connection " << c;
    EXPECT_TRUE(Contains(floods[c].message, "--max_waiting_per_connection")) << floods[c].message;
  }
  ExpectTrained(results, initial[0], kSteps);
}

}  // namespace
}  // namespace psync
