// How far a running job has got, read from its servers (GetStatus), so that
// a test triggers a kill, a stop or a freeze at a point of the job's
// progress: a wall-clock delay lands elsewhere, or after the end, on a
// machine twice as fast or as slow.
#ifndef PSYNC_TESTS_JOB_PROGRESS_H_
#define PSYNC_TESTS_JOB_PROGRESS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "proto/psync.grpc.pb.h"

namespace psync {

// Asks every server on a thread of its own, continually, so that a server
// that is down or restarting never holds up the others' answers. Version()
// and AwaitVersion() may be called from any one thread at a time.
class JobProgress {
 public:
  // Servers at "host:port" addresses, plaintext.
  explicit JobProgress(const std::vector<std::string>& servers);
  ~JobProgress();

  // The servers of a psync_launch run, from its "servers up at" line, which
  // it waits for; null (and a test failure) if the launcher ends or the
  // deadline passes first.
  static std::unique_ptr<JobProgress> OfLaunch(Subprocess& launcher, absl::Time deadline);

  // The highest version (steps applied) among the servers' latest
  // answers; -1 if none has answered lately. A server that restarted
  // reports the version the cluster rolled back to once it has restored it.
  int64_t Version() const;

  // Polls until Version() >= version and returns the version seen then;
  // -1 if `running` ended or `deadline` passed first.
  int64_t AwaitVersion(int64_t version, Subprocess& running, absl::Time deadline);

 private:
  // Asks `stub` until done_, storing each answer's version in `version`.
  void Ask(proto::ParameterServer::Stub* stub, std::atomic<int64_t>* version);

  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
  std::unique_ptr<std::atomic<int64_t>[]> versions_;  // one per server
  std::atomic<bool> done_{false};
  std::vector<std::thread> askers_;
};

}  // namespace psync

#endif  // PSYNC_TESTS_JOB_PROGRESS_H_
