// A daemon's --port_file: the port it listens on, written (atomically, as a
// number and a newline) once it listens. Whoever started the daemon waits
// for the file to learn that it is up and where.
#ifndef PSYNC_COMMON_PROCESS_PORT_FILE_H_
#define PSYNC_COMMON_PROCESS_PORT_FILE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace psync {

// Reads `path` every `poll` until it holds a port (a number > 0), and
// returns that port. Whenever the file holds none yet, calls `check` (if
// set) before waiting on: an error from it ends the wait and is returned
// as it is (the daemon exited, say, or the user pressed Ctrl-C). Once
// `deadline` has passed, DeadlineExceeded naming the path and the time
// waited. Runs on the calling thread, and so does `check`.
absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Time deadline,
                                    const std::function<absl::Status()>& check = nullptr,
                                    absl::Duration poll = absl::Milliseconds(10));

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_PORT_FILE_H_
