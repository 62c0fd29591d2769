#include "server/store/registration_check.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "common/config/worker_set.h"
#include "common/status_macros.h"

namespace psync {

// Deterministic mode's per-worker gradient buffers, all chunks together.
constexpr int64_t kMaxDeterministicBytes = int64_t{16} << 30;

// INVALID_ARGUMENT unless `frozen` are as many as a layout may have, each
// with a name of its own no longer than a layout's tensor's, and a SHA-256
// in lowercase hex.
static absl::Status CheckFrozenDigests(int rank, const std::vector<TensorDigest>& frozen) {
  if (frozen.size() > Layout::kMaxTensors) {
    return absl::InvalidArgumentError(absl::StrCat("Register: worker ", rank, " says ",
                                                   frozen.size(),
                                                   " frozen parameters, expected at most ",
                                                   Layout::kMaxTensors));
  }
  std::set<std::string> names;
  for (const TensorDigest& t : frozen) {
    if (t.name.size() > Layout::kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Register: worker ", rank, " names a frozen parameter in ", t.name.size(),
          " bytes, expected at most ", Layout::kMaxNameBytes));
    }
    if (t.name.empty() || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Register: worker ", rank, "'s frozen parameter '", t.name, "' is ",
          t.name.empty() ? "unnamed" : "named twice", ", expected one entry per named tensor"));
    }
    if (t.sha256.size() != 64 ||
        t.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Register: worker ", rank, "'s frozen parameter '", t.name, "' has digest '",
          absl::CHexEscape(t.sha256.substr(0, 80)),
          "', expected a SHA-256 as 64 lowercase hex digits"));
    }
  }
  return absl::OkStatus();
}

RegistrationCheck::RegistrationCheck(ShardStoreOptions options) : options_(std::move(options)) {}

absl::Status RegistrationCheck::CheckRequest(const RegisterArgs& args) const {
  const int rank = args.worker_rank;
  if (args.num_workers != options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker says the cluster has ", args.num_workers,
        " workers, this server was started for ", options_.num_workers));
  }
  if (rank < 0 || rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker rank ", rank, " is out of range 0..", options_.num_workers - 1));
  }
  if (!ValidWorkerWeight(args.worker_weight)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Register: worker %d has weight %.10g, expected 0..%g (exclusive of 0: the sum of its "
        "device weights)", rank, args.worker_weight, kMaxWorkerWeight));
  }
  const Layout& layout = *args.layout;
  if (layout.fingerprint() != args.claimed_fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: worker ", rank, " claims layout fingerprint ", args.claimed_fingerprint,
        " but its layout spec hashes to ", layout.fingerprint()));
  }
  if (layout.num_servers() != options_.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Register: layout is for ", layout.num_servers(), " servers, this cluster has ",
        options_.num_servers));
  }
  for (int32_t id : layout.ChunksOnServer(options_.server_rank)) {
    const ChunkInfo& chunk = layout.chunks()[id];
    if (chunk.bytes() + kMessageHeadroomBytes > options_.max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "Register: chunk ", id, " of tensor '", layout.tensors()[chunk.tensor].name, "' has ",
          chunk.bytes(), " bytes, more than the message limit of ", options_.max_message_bytes,
          " bytes less 1 MiB headroom allows; raise --max_message_mb or lower --chunk_kb"));
    }
  }
  if (args.frozen.has_value()) PSYNC_RETURN_IF_ERROR(CheckFrozenDigests(rank, *args.frozen));
  const int64_t bytes = layout.ServerBytes(options_.server_rank);
  if (options_.deterministic && bytes * options_.num_workers > kMaxDeterministicBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "Register: deterministic mode keeps one gradient per worker: ", options_.num_workers,
        " x ", bytes, " bytes is over the ", kMaxDeterministicBytes, "-byte limit"));
  }
  return absl::OkStatus();
}

absl::Status RegistrationCheck::CheckJob(const RegisterArgs& args, const Shard* shard) const {
  const int rank = args.worker_rank;
  const Layout& layout = *args.layout;
  if (shard != nullptr && shard->layout->fingerprint() != layout.fingerprint()) {
    const std::string difference =
        LayoutDifference(layout, "the worker's", *shard->layout, "the server's");
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", rank, "'s layout (fingerprint ", layout.fingerprint(),
        ") is not this server's (fingerprint ", shard->layout->fingerprint(), ", ",
        shard->origin, "): ",
        difference.empty() ? "the chunks are placed differently" : difference,
        "; the model, --chunk_kb, --seed and the server count must be the job's"));
  }
  absl::Status valid = args.shape.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Register: worker ", rank, ": ", valid.message()));
  }
  PSYNC_RETURN_IF_ERROR(CheckPeakRate(args));
  if (!args.update_rule.empty() && !options_.update_rule.empty() &&
      args.update_rule != options_.update_rule) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", rank, "'s optimizer settings are '", args.update_rule, "', server ",
        options_.server_rank, "'s are '", options_.update_rule,
        "': every server and worker of a job needs the same (--config or the optimizer flags)"));
  }
  if (args.wire_dtype.has_value() && options_.wire_dtype.has_value() &&
      *args.wire_dtype != *options_.wire_dtype) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", rank, " sends gradients and weights as ",
        WireDTypeName(*args.wire_dtype), ", server ", options_.server_rank, "'s job says ",
        WireDTypeName(*options_.wire_dtype),
        ": every server and worker of a job needs the same --wire_dtype (a worker's weights "
        "would be rounded unlike the others')"));
  }
  // The job's source, or the one the first worker to register declared.
  const std::optional<InitSource>& init_from =
      shard != nullptr ? shard->init_from : options_.init_from;
  if (args.init_from.has_value() && init_from.has_value() && *args.init_from != *init_from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Register: worker ", rank, " takes its initial weights from the ",
        InitSourceName(*args.init_from), ", server ", options_.server_rank, " from the ",
        InitSourceName(*init_from),
        options_.init_from.has_value() ? "" : absl::StrCat(" (", shard->origin, ")"),
        ": every server and worker of a job needs the same --init_from (--init_weights "
        "implies worker; left out, psync_worker takes the seed and a torch worker its model)"));
  }
  if (shard != nullptr) {
    absl::Status same = args.shape.CheckSame(shard->shape);
    if (!same.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Register: worker ", rank, ": ", same.message()));
    }
    return absl::OkStatus();
  }
  return CheckMemoryFor(layout.ServerBytes(options_.server_rank));
}

absl::StatusOr<bool> RegistrationCheck::CheckFrozen(
    const RegisterArgs& args, const std::optional<JobFrozenTensors>& job) const {
  if (!args.frozen.has_value() || !job.has_value()) return false;
  std::map<std::string, const TensorDigest*> theirs;
  for (const TensorDigest& t : job->tensors) theirs[t.name] = &t;
  const std::string worker = absl::StrCat("worker ", args.worker_rank);
  std::string difference;
  for (const TensorDigest& mine : *args.frozen) {
    const auto found = theirs.find(mine.name);
    if (found == theirs.end()) {
      difference = absl::StrCat(worker, " has frozen parameter '", mine.name,
                                "', which the job's lack");
    } else if (found->second->sha256 != mine.sha256) {
      difference = absl::StrCat(worker, "'s frozen parameter '", mine.name,
                                "' holds other values, dtype or shape (SHA-256 ",
                                mine.sha256.substr(0, 12),
                                "... against the job's ", found->second->sha256.substr(0, 12),
                                "...)");
    }
    if (!difference.empty()) break;
    theirs.erase(found);
  }
  if (difference.empty() && !theirs.empty()) {
    difference = absl::StrCat(worker, " lacks the job's frozen parameter '",
                              theirs.begin()->first, "'");
  }
  if (difference.empty()) return false;
  if (job->ranks == std::set<int>{args.worker_rank}) return true;
  return absl::FailedPreconditionError(absl::StrCat(
      "Register: ", difference, ", fixed by ", job->origin,
      ": frozen parameters (requires_grad=False) are neither trained nor sent through the "
      "servers, so every worker must build them alike: seed torch before building the model "
      "(torch.manual_seed(job.seed)) or load the same values"));
}

void RegistrationCheck::NoteFrozen(const RegisterArgs& args, bool refix,
                                   std::optional<JobFrozenTensors>& job) const {
  if (!args.frozen.has_value()) return;
  if (refix) {
    LOG(WARNING) << "server " << options_.server_rank << ": worker " << args.worker_rank
                 << " registered again with other frozen parameters than those it fixed ("
                 << job->origin << "), with which no other worker registered: they are "
                 << "replaced";
  }
  if (!job.has_value() || refix) {
    job = JobFrozenTensors{*args.frozen,
                        absl::StrCat("worker ", args.worker_rank, "'s registration",
                                     args.peer.empty() ? "" : " from ", args.peer),
                        {}};
  }
  job->ranks.insert(args.worker_rank);
}

absl::Status RegistrationCheck::CheckPeakRate(const RegisterArgs& args) const {
  if (options_.lr_policy.IsConstant()) return absl::OkStatus();
  // The policy's largest rate (warmup's end) with this shape's global
  // batch, as the step uses it.
  const LrPolicy& p = options_.lr_policy;
  const double exact = p.RateFor(p.warmup_steps, args.shape, options_.num_workers);
  const float peak = static_cast<float>(exact);
  const bool vanishes = exact > 0 && peak == 0.0f;  // no step would change a weight
  if (std::isfinite(peak) && !vanishes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "Register: worker ", args.worker_rank, ": with a global batch of ",
      args.shape.GlobalBatch(options_.num_workers), " the learning rate (", p.Describe(),
      ") reaches ", vanishes ? exact : peak,
      vanishes ? ", which is 0 in float32: no step would change the weights; raise --lr or "
                 "lower --base_batch"
               : ", past float32's range; lower --lr or raise --base_batch"));
}

absl::Status RegistrationCheck::CheckMemoryFor(int64_t share_bytes) const {
  if (!options_.available_memory) return absl::OkStatus();
  // What the store surely allocates, in shares: the weights of the current
  // and the previous version, the optimizer state (twice when version - 1's
  // is kept), and deterministic mode's gradient per worker. Measured peaks
  // are higher (3.6x with momentum, README): a share refused here would not
  // have fit.
  const int state = options_.optimizer.KeepsMomentum() + options_.optimizer.KeepsSecondMoment();
  const int64_t shares = 2 + state + (options_.keep_previous_state ? state : 0) +
                         (options_.deterministic ? options_.num_workers : 0);
  const int64_t have = options_.available_memory();
  if (have < 0 || share_bytes <= have / shares) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "Register: server ", options_.server_rank, "'s share of the model is ", share_bytes,
      " bytes, and holding it takes at least ", shares, "x that (the weights of two versions",
      state > 0 ? " and the optimizer state" : "",
      options_.deterministic ? " and one gradient per worker" : "", "), more than the ", have,
      " bytes of memory this server can still take; use more servers (--num_servers) or a "
      "machine with more memory"));
}

}  // namespace psync
