#include "common/config/job_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/cluster_spec.h"
#include "common/config/json_keys.h"
#include "common/config/lr_policy.h"
#include "common/config/model_spec.h"
#include "common/config/optimizer_kind.h"
#include "common/format/file_util.h"
#include "common/rpc/tcp_congestion.h"
#include "common/status_macros.h"
#include "common/wire/wire_dtype.h"
#include "common/config/init_source.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace psync {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::TextFormat;

// A leaf field and the section (nested message of JobConfig) holding it.
struct FieldRef {
  const FieldDescriptor* section = nullptr;
  const FieldDescriptor* field = nullptr;

  std::string path() const { return absl::StrCat(section->name(), ".", field->name()); }
};

std::vector<FieldRef> AllFields() {
  std::vector<FieldRef> out;
  const Descriptor* d = proto::JobConfig::descriptor();
  for (int s = 0; s < d->field_count(); ++s) {
    const FieldDescriptor* section = d->field(s);
    for (int f = 0; f < section->message_type()->field_count(); ++f) {
      out.push_back({section, section->message_type()->field(f)});
    }
  }
  return out;
}

std::optional<FieldRef> FindField(absl::string_view name) {
  for (const FieldRef& f : AllFields()) {
    if (f.field->name() == name) return f;
  }
  return std::nullopt;
}

class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstError(absl::string_view name) : name_(name) {}
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(name_, ":", line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& error() const { return error_; }

 private:
  std::string name_;
  std::string error_;
};

// What an error is about: "--flag" for a value from a flag, where the value
// came from and the field for one from a file, and the flag for a default
// (a field that another one's value needs set).
std::string Subject(absl::string_view source, const FieldRef& f) {
  if (absl::StartsWith(source, "--")) return std::string(source);
  if (source.empty()) return absl::StrCat("--", f.field->name(), " (not set)");
  return absl::StrCat(source, ": ", f.path());
}

// `path` made absolute, without "." and ".." parts and repeated slashes (no
// links followed): two spellings of one file compare equal.
std::string NormalPath(const std::string& path) {
  std::error_code error;  // no working directory: compared as given
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return (error ? std::filesystem::path(path) : absolute).lexically_normal().string();
}

// The value of a leaf field in text form, for messages.
std::string ValueText(const proto::JobConfig& config, const FieldRef& f) {
  const Reflection* r = config.GetReflection();
  const Message& section = r->GetMessage(config, f.section);
  std::string text;
  TextFormat::PrintFieldValueToString(section, f.field, -1, &text);
  return text;
}

// A check of one field: an error naming where the value came from, the
// field, the value and what was expected.
class Checker {
 public:
  Checker(const LoadedJobConfig& loaded) : loaded_(loaded) {}

  void Expect(absl::string_view field, bool ok, absl::string_view expected) {
    if (ok || !error_.ok()) return;
    error_ = JobConfigFieldError(loaded_, field, expected);
  }
  absl::Status status() const { return error_; }

 private:
  const LoadedJobConfig& loaded_;
  absl::Status error_;
};

// cluster.*: the processes and their addresses.
void CheckCluster(const proto::JobConfig& c, Checker& check) {
  check.Expect("num_servers", c.cluster().num_servers() >= 1 && c.cluster().num_servers() <= 4096,
               "1..4096");
  check.Expect("num_workers", c.cluster().num_workers() >= 1 && c.cluster().num_workers() <= 65536,
               "1..65536");
  check.Expect("min_workers",
               c.cluster().min_workers() >= 0 &&
                   c.cluster().min_workers() <= c.cluster().num_workers(),
               absl::StrCat("0..", c.cluster().num_workers(), " (max_workers)"));
  check.Expect("max_workers",
               c.cluster().max_workers() == 0 ||
                   c.cluster().max_workers() == c.cluster().num_workers(),
               absl::StrCat("0 or num_workers (", c.cluster().num_workers(),
                            "): in an elastic job they are one number"));
  const std::string& servers = c.cluster().servers();
  if (absl::StrContains(servers, "{rank}")) {
    check.Expect("servers", !absl::StrContains(servers, ","),
                 "one pattern with {rank}, or a list of addresses without it");
  } else if (!servers.empty()) {
    const std::vector<std::string> list = absl::StrSplit(servers, ',');
    check.Expect("servers", static_cast<int>(list.size()) == c.cluster().num_servers(),
                 absl::StrCat(c.cluster().num_servers(), " addresses (cluster.num_servers)"));
  }
  // Checked once the count is: a pattern expands to num_servers addresses.
  if (check.status().ok() && !servers.empty()) {
    const absl::StatusOr<std::vector<std::string>> parsed =
        ParseServerAddresses(absl::StrJoin(ServerAddresses(c), ","));
    check.Expect("servers", parsed.ok(),
                 absl::StrCat("host:port addresses (",
                              absl::StripPrefix(parsed.status().message(), "--servers: "), ")"));
  }
  const absl::StatusOr<TcpCongestion> congestion = ParseTcpCongestion(c.cluster().tcp_congestion());
  check.Expect("tcp_congestion", congestion.ok(),
               congestion.ok() ? "" : absl::StripPrefix(
                                          congestion.status().message(),
                                          absl::StrCat("--tcp_congestion is '",
                                                       c.cluster().tcp_congestion(),
                                                       "', expected ")));
}

// training.* and data.*.
void CheckTraining(const proto::JobConfig& c, Checker& check) {
  const proto::TrainingConfig& t = c.training();
  const absl::StatusOr<ModelSpec> model = ParseModelSpec(t.model());
  check.Expect("model", model.ok(),
               model.ok() ? "" : absl::StripPrefix(
                                     model.status().message(),
                                     absl::StrCat("--model is '", t.model(), "', expected ")));
  check.Expect("devices", t.devices() >= 1 && t.devices() <= 1024, "1..1024");
  check.Expect("device", t.device() == "auto" || t.device() == "cpu" || t.device() == "cuda",
               "auto, cpu or cuda");
  check.Expect("batch_per_device", t.batch_per_device() >= 1 && t.batch_per_device() <= (1 << 20),
               "1..1048576");
  check.Expect("accumulation_steps", t.accumulation_steps() >= 1 && t.accumulation_steps() <= 65536,
               "1..65536 micro-batches per step");
  check.Expect("blas_core",
               t.blas_core().size() <= 32 &&
                   std::all_of(t.blas_core().begin(), t.blas_core().end(),
                               [](char ch) { return absl::ascii_isalnum(ch); }),
               "an OpenBLAS core name such as Haswell, SkylakeX, Zen or Sandybridge (letters "
               "and digits), or empty for the kernels OpenBLAS picks");
  check.Expect("wire_dtype", ParseWireDType(t.wire_dtype()).ok(), WireDTypeChoices());
  check.Expect("init_from", t.init_from().empty() || ParseInitSource(t.init_from()).ok(),
               InitSourceChoices() + ", or empty for the workers' kind's");
  // A file of initial weights is worker 0's to send: --init_from=seed
  // would have the servers ignore it.
  check.Expect("init_from", t.init_weights().empty() || t.init_from().empty() ||
                                t.init_from() == InitSourceName(InitSource::kWorker),
               "worker (or left out) with --init_weights, whose values worker 0 sends");
  check.Expect("push_window_kb", t.push_window_kb() >= 0 && t.push_window_kb() <= (1 << 30),
               "0..1073741824 (0: automatic)");
  check.Expect("overlap_min_kb", t.overlap_min_kb() >= 0 && t.overlap_min_kb() <= (1 << 30),
               "0..1073741824 (0: push each layer as soon as it is ready)");
  check.Expect("epochs", t.epochs() >= 1, ">= 1");
  check.Expect("steps", t.steps() >= 0, ">= 0 (0: train --epochs)");
  check.Expect("chunk_kb", t.chunk_kb() >= 1 && t.chunk_kb() <= (1 << 20), "1..1048576");
  check.Expect("synthetic_samples", c.data().synthetic_samples() >= 0,
               ">= 0 (0: Fashion-MNIST)");
}

// optimizer.*: the optimizer and its learning-rate policy.
void CheckOptimizer(const proto::OptimizerConfig& o, Checker& check) {
  // The servers step in float32: each value is checked as it will be used.
  auto f32 = [](double v) { return static_cast<float>(v); };
  const absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(o.optimizer());
  const absl::StatusOr<LrScaling> scaling = ParseLrScaling(o.lr_scaling());
  const absl::StatusOr<LrSchedule> schedule = ParseLrSchedule(o.lr_schedule());
  auto is = [](const auto& parsed, auto value) { return parsed.ok() && *parsed == value; };
  check.Expect("lr", std::isfinite(f32(o.lr())) && f32(o.lr()) > 0,
               "a number > 0 that float32 holds (about 1.4e-45 to 3.4e38)");
  check.Expect("momentum", f32(o.momentum()) >= 0 && f32(o.momentum()) < 1,
               "0 <= momentum < 1 in float32 (at most 0.99999994)");
  check.Expect("weight_decay",
               std::isfinite(f32(o.weight_decay())) && f32(o.weight_decay()) >= 0,
               "a number >= 0 that float32 holds (at most about 3.4e38)");
  check.Expect("optimizer", kind.ok(), OptimizerKindChoices());
  check.Expect("nesterov", !o.nesterov() || (is(kind, OptimizerKind::kSgd) && o.momentum() > 0),
               "false unless optimizer is sgd with momentum > 0");
  check.Expect("beta1", f32(o.beta1()) >= 0 && f32(o.beta1()) < 1,
               "0 <= beta1 < 1 in float32 (at most 0.99999994)");
  check.Expect("beta2", f32(o.beta2()) >= 0 && f32(o.beta2()) < 1,
               "0 <= beta2 < 1 in float32 (at most 0.99999994)");
  check.Expect("epsilon", std::isfinite(f32(o.epsilon())) && f32(o.epsilon()) > 0,
               "a number > 0 that float32 holds (about 1.4e-45 to 3.4e38)");
  check.Expect("lr_scaling", scaling.ok(), LrScalingChoices());
  check.Expect("base_batch", is(scaling, LrScaling::kNone) || o.base_batch() >= 1,
               "the global batch optimizer.lr was tuned for (>= 1), with lr_scaling");
  check.Expect("warmup_steps", o.warmup_steps() >= 0, ">= 0");
  check.Expect("lr_schedule", schedule.ok(), LrScheduleChoices());
  for (const char* f : {"lr_decay_steps", "lr_decay_epochs"}) {
    const std::string& text =
        o.GetReflection()->GetString(o, FindField(f)->field);
    check.Expect(f, ParseMilestones(f, text).ok(), "ascending whole numbers > 0, e.g. 30,60");
    check.Expect(f, text.empty() || is(schedule, LrSchedule::kStep),
                 "empty unless lr_schedule is step");
  }
  check.Expect("lr_decay_steps",
               !is(schedule, LrSchedule::kStep) ||
                   o.lr_decay_steps().empty() != o.lr_decay_epochs().empty(),
               "milestones in exactly one of lr_decay_steps and lr_decay_epochs with "
               "lr_schedule step");
  check.Expect("lr_decay_factor", o.lr_decay_factor() > 0 && o.lr_decay_factor() <= 1,
               "0 < factor <= 1");
  check.Expect("lr_final", std::isfinite(o.lr_final()) && o.lr_final() >= 0,
               "a finite number >= 0");
  check.Expect("lr_final", !is(schedule, LrSchedule::kCosine) || o.lr_final() <= o.lr(),
               "at most optimizer.lr (cosine decays from lr to lr_final)");
  // A value given for what this optimizer or schedule does not use would be
  // silently ignored: refused, as milestones without a step schedule are.
  const bool sgd = is(kind, OptimizerKind::kSgd);
  check.Expect("momentum", !o.has_momentum() || o.momentum() == 0 || !kind.ok() || sgd,
               "0 unless optimizer is sgd (adam and adamw keep beta1 instead)");
  for (const char* f : {"beta1", "beta2", "epsilon"}) {
    check.Expect(f, !o.GetReflection()->HasField(o, FindField(f)->field) || !kind.ok() || !sgd,
                 "unset unless optimizer is adam or adamw");
  }
  check.Expect("lr_final", !o.has_lr_final() || is(schedule, LrSchedule::kCosine),
               "unset unless lr_schedule is cosine");
  check.Expect("lr_decay_factor", !o.has_lr_decay_factor() || is(schedule, LrSchedule::kStep),
               "unset unless lr_schedule is step");
  check.Expect("base_batch", !o.has_base_batch() || !is(scaling, LrScaling::kNone),
               "unset unless lr_scaling is linear or sqrt");
}

// checkpoint.* and timeouts.*.
void CheckCheckpointsAndTimeouts(const proto::JobConfig& c, Checker& check) {
  const proto::CheckpointConfig& k = c.checkpoint();
  check.Expect("checkpoint_every", k.checkpoint_every() >= 0, ">= 0 (0: only at shutdown)");
  check.Expect("checkpoint_every", k.checkpoint_every() == 0 || !k.checkpoint_dir().empty(),
               "0 when checkpoint.checkpoint_dir is empty");
  check.Expect("keep_checkpoints", k.keep_checkpoints() >= 2,
               ">= 2 (a rollback may need the one before the newest)");
  // The coordinator takes at most 4096 versions per server (other server
  // counts' sets included).
  check.Expect("keep_checkpoints", k.keep_checkpoints() <= 1000, "at most 1000");
  const proto::TimeoutConfig& to = c.timeouts();
  for (const char* f : {"rpc_timeout_s", "connect_timeout_s", "peer_timeout_s", "pull_timeout_s"}) {
    const FieldRef ref = *FindField(f);
    const int32_t v = to.GetReflection()->GetInt32(to, ref.field);
    check.Expect(f, v >= 1, ">= 1");
  }
  // Bounded: psync_launch waits this long for its workers when it stops.
  check.Expect("stop_grace_s", to.stop_grace_s() >= 0 && to.stop_grace_s() <= 600,
               "0..600 seconds");
  check.Expect("worker_lease_ms", to.worker_lease_ms() >= 100, ">= 100");
  check.Expect("worker_lease_ms", to.worker_lease_ms() <= to.peer_timeout_s() * int64_t{1000},
               "at most timeouts.peer_timeout_s");
  check.Expect("handshake_timeout_s",
               to.handshake_timeout_s() >= 1 && to.handshake_timeout_s() <= 86400, "1..86400");
  check.Expect("idle_timeout_s", to.idle_timeout_s() >= 1 && to.idle_timeout_s() <= 86400,
               "1..86400");
}

// output.*.
void CheckOutputs(const proto::JobConfig& c, Checker& check) {
  check.Expect("metrics_csv_every", c.output().metrics_csv_every() >= 1, ">= 1");
  check.Expect("trace_steps", c.output().trace_steps() >= 1 && c.output().trace_steps() <= 10000,
               "1..10000 (a trace is kept in memory until the end)");
  // Output files written over each other would keep only the last one.
  const std::pair<const char*, std::string> outputs[] = {
      {"export_path", c.output().export_path()},
      {"summary", c.output().summary()},
      {"metrics_csv", c.output().metrics_csv()},
      {"trace", absl::StrReplaceAll(c.output().trace(), {{"{rank}", "0"}})},  // worker 0's
  };
  for (size_t i = 0; i < std::size(outputs); ++i) {
    if (outputs[i].second.empty()) continue;
    const std::string path = NormalPath(outputs[i].second);
    for (size_t j = i + 1; j < std::size(outputs); ++j) {
      check.Expect(outputs[j].first,
                   outputs[j].second.empty() || NormalPath(outputs[j].second) != path,
                   absl::StrCat("another file than output.", outputs[i].first, " (both are ",
                                path, ")"));
    }
  }
}

// server.*, observability.* and security.*.
void CheckServing(const proto::JobConfig& c, Checker& check) {
  const proto::ServerConfig& s = c.server();
  check.Expect("port", s.port() >= 0 && s.port() <= 65535, "0..65535 (0: a free one)");
  check.Expect("host", !s.host().empty(), "an address to listen on");
  check.Expect("max_message_mb", s.max_message_mb() >= 2 && s.max_message_mb() <= 2047,
               "2..2047");
  check.Expect("max_waiting_calls", s.max_waiting_calls() >= 1, ">= 1");
  check.Expect("max_waiting_per_connection",
               s.max_waiting_per_connection() >= 1 &&
                   s.max_waiting_per_connection() <= s.max_waiting_calls(),
               "1..server.max_waiting_calls");
  check.Expect("rpc_threads", s.rpc_threads() >= 1 && s.rpc_threads() <= 64, "1..64");
  check.Expect("payload_port", s.payload_port() >= 0 && s.payload_port() <= 65535,
               "0..65535 (0: a free one)");
  check.Expect("payload_port", s.payload_port() == 0 || s.payload_port() != s.port(),
               "another port than server.port");
  check.Expect("health_port", s.health_port() >= 0 && s.health_port() <= 65535,
               "0..65535 (0: none)");
  check.Expect("health_port", s.health_port() == 0 || s.health_port() != s.port(),
               "another port than server.port");
  const proto::ObservabilityConfig& ob = c.observability();
  check.Expect("metrics_port", ob.metrics_port() >= 0 && ob.metrics_port() <= 65535,
               "0..65535 (0: off)");
  check.Expect("metrics_port",
               ob.metrics_port() == 0 ||
                   (ob.metrics_port() != s.port() && ob.metrics_port() != s.health_port()),
               "another port than server.port and server.health_port");
  check.Expect("metrics_host", !ob.metrics_host().empty(), "an address to listen on");
  check.Expect("log_format", ob.log_format() == "text" || ob.log_format() == "json",
               "text or json");
  const proto::SecurityConfig& sec = c.security();
  check.Expect("tls_key", sec.tls_cert().empty() == sec.tls_key().empty(),
               "a key exactly when security.tls_cert is set");
  check.Expect("tls_ca", sec.tls_cert().empty() == sec.tls_ca().empty(),
               "a CA exactly when security.tls_cert is set: psync's TLS is mutual (one "
               "configuration for every process: each verifies its peers with the CA and "
               "presents the certificate)");
}

absl::Status Validate(const LoadedJobConfig& loaded) {
  const proto::JobConfig& c = loaded.config;
  Checker check(loaded);
  CheckCluster(c, check);
  CheckTraining(c, check);
  CheckOptimizer(c.optimizer(), check);
  CheckCheckpointsAndTimeouts(c, check);
  CheckOutputs(c, check);
  CheckServing(c, check);
  return check.status();
}

// The line of the key that an error of protobuf's JSON parser names
// ("(optimizer.lr): invalid value ...", "(optimizer) lrr: Cannot find
// field.", "optimizerr: Cannot find field."), or 0. `lines` as JsonKeyLines.
int LineOfJsonError(absl::string_view message,
                    const absl::flat_hash_map<std::string, int>& lines) {
  std::string path;
  if (absl::ConsumePrefix(&message, "(")) {
    const size_t close = message.find(')');
    if (close == absl::string_view::npos) return 0;
    path = std::string(message.substr(0, close));
    message.remove_prefix(close + 1);
    if (absl::ConsumePrefix(&message, " ")) {
      absl::StrAppend(&path, ".", message.substr(0, message.find(':')));
    }
  } else {
    path = std::string(message.substr(0, message.find(':')));
  }
  std::vector<std::string> keys = absl::StrSplit(path, '.');
  for (std::string& key : keys) key = JsonFieldKey(key);
  auto line = lines.find(absl::StrJoin(keys, "."));
  return line == lines.end() ? 0 : line->second;
}

// Records the file line of every field set in the file.
void RecordLines(absl::string_view name, const TextFormat::ParseInfoTree& tree,
                 const proto::JobConfig& config, ConfigSources* sources) {
  for (const FieldRef& f : AllFields()) {
    const Reflection* r = config.GetReflection();
    if (!r->HasField(config, f.section)) continue;
    const TextFormat::ParseInfoTree* nested = tree.GetTreeForNested(f.section, -1);
    if (nested == nullptr) continue;
    const TextFormat::ParseLocation at = nested->GetLocation(f.field, -1);
    if (at.line >= 0) (*sources)[f.field->name()] = absl::StrCat(name, ":", at.line + 1);
  }
}

}  // namespace

absl::Status JobConfigFieldError(const LoadedJobConfig& loaded, absl::string_view field,
                                 absl::string_view expected) {
  const FieldRef f = *FindField(field);
  auto source = loaded.sources.find(std::string(field));
  return absl::InvalidArgumentError(
      absl::StrCat(Subject(source == loaded.sources.end() ? "" : source->second, f), " is ",
                   ValueText(loaded.config, f), ", expected ", expected));
}

absl::Status ReadJobConfigFile(const std::string& path, LoadedJobConfig* loaded) {
  PSYNC_ASSIGN_OR_RETURN(const std::string text,
                         ReadSmallFile("job configuration", path, kMaxJobConfigFileBytes));
  return ParseJobConfig(path, text, loaded);
}

std::vector<std::string> JobConfigFieldNames() {
  std::vector<std::string> names;
  for (const FieldRef& f : AllFields()) names.push_back(f.field->name());
  return names;
}

absl::Status ParseJobConfig(absl::string_view name, const std::string& text,
                            LoadedJobConfig* loaded) {
  if (absl::EndsWith(name, ".json")) {
    PSYNC_ASSIGN_OR_RETURN(const auto lines, JsonKeyLines(name, text));
    google::protobuf::util::JsonParseOptions options;
    auto s = google::protobuf::util::JsonStringToMessage(text, &loaded->config, options);
    if (!s.ok()) {
      const std::string message = s.message().ToString();
      const int line = LineOfJsonError(message, lines);
      return absl::InvalidArgumentError(
          absl::StrCat(name, line > 0 ? absl::StrCat(":", line) : "", ": ", message));
    }
    for (const FieldRef& f : AllFields()) {
      const Reflection* r = loaded->config.GetReflection();
      if (r->HasField(loaded->config, f.section) &&
          r->GetMessage(loaded->config, f.section).GetReflection()->HasField(
              r->GetMessage(loaded->config, f.section), f.field)) {
        auto line = lines.find(absl::StrCat(JsonFieldKey(f.section->name()), ".",
                                            JsonFieldKey(f.field->name())));
        loaded->sources[f.field->name()] =
            line == lines.end() ? std::string(name) : absl::StrCat(name, ":", line->second);
      }
    }
    return absl::OkStatus();
  }
  TextFormat::Parser parser;
  FirstError errors(name);
  parser.RecordErrorsTo(&errors);
  TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &loaded->config)) {
    return absl::InvalidArgumentError(errors.error().empty() ? absl::StrCat(name, ": unreadable")
                                                             : errors.error());
  }
  RecordLines(name, tree, loaded->config, &loaded->sources);
  return absl::OkStatus();
}

absl::Status SetJobConfigField(absl::string_view field, absl::string_view value,
                               absl::string_view source, LoadedJobConfig* loaded) {
  const std::optional<FieldRef> f = FindField(field);
  if (!f.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no job configuration field '",
                                                   field, "'"));
  }
  Message* section =
      loaded->config.GetReflection()->MutableMessage(&loaded->config, f->section);
  const Reflection* r = section->GetReflection();
  const std::string v(absl::StripAsciiWhitespace(value));
  bool ok = true;
  // A case per field type, alike in shape: protobuf's Reflection has a
  // setter per type and absl a parser per type, so each case pairs the two.
  switch (f->field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t x;
      ok = absl::SimpleAtoi(v, &x);
      if (ok) r->SetInt32(section, f->field, x);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t x;
      ok = absl::SimpleAtoi(v, &x);
      if (ok) r->SetInt64(section, f->field, x);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t x;
      ok = absl::SimpleAtoi(v, &x);
      if (ok) r->SetUInt64(section, f->field, x);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double x;
      ok = absl::SimpleAtod(v, &x);
      if (ok) r->SetDouble(section, f->field, x);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool x;
      ok = absl::SimpleAtob(v, &x);
      if (ok) r->SetBool(section, f->field, x);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(section, f->field, std::string(value));
      break;
    default:
      ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(Subject(source, *f), " is '", value,
                                                   "', expected a ",
                                                   f->field->cpp_type_name()));
  }
  loaded->sources[f->field->name()] = std::string(source);
  return absl::OkStatus();
}

absl::Status FinishJobConfig(LoadedJobConfig* loaded) {
  proto::ClusterConfig* cluster = loaded->config.mutable_cluster();
  // A list of addresses says how many servers there are.
  if (!cluster->has_num_servers() && !cluster->servers().empty() &&
      !absl::StrContains(cluster->servers(), "{rank}")) {
    cluster->set_num_servers(
        static_cast<int32_t>(std::vector<std::string>(absl::StrSplit(cluster->servers(), ','))
                                 .size()));
    loaded->sources["num_servers"] = loaded->sources["servers"];
  }
  // In an elastic job max_workers is the job's worker count.
  if (cluster->max_workers() > 0 && !cluster->has_num_workers()) {
    cluster->set_num_workers(cluster->max_workers());
    loaded->sources["num_workers"] = loaded->sources["max_workers"];
  }
  return Validate(*loaded);
}

std::vector<std::string> ServerAddresses(const proto::JobConfig& config) {
  const std::string& servers = config.cluster().servers();
  if (!absl::StrContains(servers, "{rank}")) {
    if (servers.empty()) return {};
    return absl::StrSplit(servers, ',');
  }
  std::vector<std::string> out;
  for (int r = 0; r < config.cluster().num_servers(); ++r) {
    out.push_back(absl::StrReplaceAll(servers, {{"{rank}", absl::StrCat(r)}}));
  }
  return out;
}

LrPolicy LrPolicyOf(const proto::JobConfig& config) {
  const proto::OptimizerConfig& o = config.optimizer();
  LrPolicy p;
  p.lr = o.lr();
  p.scaling = ParseLrScaling(o.lr_scaling()).value_or(LrScaling::kNone);
  p.base_batch = o.base_batch();
  p.warmup_steps = o.warmup_steps();
  p.schedule = ParseLrSchedule(o.lr_schedule()).value_or(LrSchedule::kConstant);
  p.decay_steps = ParseMilestones("--lr_decay_steps", o.lr_decay_steps()).value_or(std::vector<int64_t>());
  p.decay_epochs = ParseMilestones("--lr_decay_epochs", o.lr_decay_epochs()).value_or(std::vector<int64_t>());
  p.decay_factor = o.lr_decay_factor();
  p.final_lr = o.lr_final();
  return p;
}

std::optional<InitSource> InitSourceOf(const proto::JobConfig& config) {
  if (!config.training().init_weights().empty()) return InitSource::kWorker;
  if (config.training().init_from().empty()) return std::nullopt;
  return ParseInitSource(config.training().init_from()).value_or(InitSource::kSeed);
}

std::string UpdateRuleOf(const proto::JobConfig& config) {
  // Never empty (the defaults print as nothing), as empty means unchecked.
  const std::string text = config.optimizer().ShortDebugString();
  return text.empty() ? "optimizer { }" : absl::StrCat("optimizer { ", text, " }");
}

std::string JobConfigToText(const proto::JobConfig& config) {
  std::string text;
  TextFormat::PrintToString(config, &text);
  return text;
}

}  // namespace psync
