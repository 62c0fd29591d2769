#include "worker/client/rpc/silent_server.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"

namespace psync {
namespace {

const char* StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "unknown";
}

constexpr char kBusy[] = "; it is busy (with a large registration or a checkpoint, say)";

}  // namespace

Silence ClassifySilence(const grpc::Status& probe, grpc_connectivity_state channel) {
  if (probe.ok()) return Silence::kBusy;
  switch (probe.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return Silence::kUnreachable;
    // A probe that times out on a connected channel was sent and not
    // answered; on any other, no connection was made in time.
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return channel == GRPC_CHANNEL_READY ? Silence::kBusy : Silence::kUnreachable;
    default:
      return Silence::kFailing;
  }
}

absl::Status DescribeSilence(const SilentServer& s, const PeerSecurity& security) {
  // To a tenth of a second: an attempt cut short by the connect timeout
  // waited what was left of it.
  const std::string waited =
      absl::FormatDuration(absl::Ceil(s.register_deadline, absl::Milliseconds(100)));
  const std::string probed =
      absl::FormatDuration(absl::Ceil(s.probe_deadline, absl::Milliseconds(100)));
  switch (ClassifySilence(s.probe, s.channel)) {
    case Silence::kUnreachable:
      if (s.probe.error_code() == grpc::StatusCode::UNAVAILABLE) {
        // A connection closed during its setup has a hint of its own (TLS
        // on one end only, say): the server is running there.
        const std::string error = ConnectionErrorMessage(s.probe, security);
        return absl::DeadlineExceededError(absl::StrCat(
            s.peer, " could not be reached: ", error,
            error == s.probe.error_message() ? "; is it running, at that address?" : ""));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          s.peer, " could not be reached: no connection within ", probed, " (the channel is ",
          StateName(s.channel), "); is it running, and does that address reach it?"));
    case Silence::kBusy:
      if (s.probe.ok()) {
        return absl::DeadlineExceededError(
            absl::StrCat(s.peer, " is connected but slow to answer: it answered a status request "
                         "but not Register within ", waited, kBusy));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          s.peer, " is connected but slow to answer: neither Register (", waited,
          ") nor a status request (", probed, ") got an answer", kBusy));
    case Silence::kFailing:
      break;
  }
  return absl::DeadlineExceededError(absl::StrCat(
      s.peer, " did not answer Register within ", waited, ", and a status request failed: ",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.probe.error_code())), ": ",
      ConnectionErrorMessage(s.probe, security)));
}

std::string WaitingToRegister(absl::Duration waited, absl::Duration connect_timeout,
                              absl::string_view why) {
  return absl::StrCat("waiting to register for ",
                      absl::FormatDuration(absl::Trunc(waited, absl::Seconds(1))),
                      ", retrying until --connect_timeout_s=",
                      absl::ToInt64Seconds(connect_timeout), ": ", why);
}

}  // namespace psync
