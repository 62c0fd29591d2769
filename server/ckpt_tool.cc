// psync_ckpt: inspects and exports server checkpoints (format in
// server/checkpoint_format.h).
//   psync_ckpt list   --checkpoint_dir=D[,D2...]
//   psync_ckpt export --checkpoint_dir=D[,D2...] [--version=N] --out=FILE
// Exit status: 0 done, 1 failed, 2 bad arguments (also a flag that Abseil
// cannot parse, unknown or with a bad value: ParseFlagsOrExit).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/config/flags_help.h"
#include "common/format/output_path.h"
#include "common/format/safetensors.h"
#include "common/format/sha256.h"
#include "server/checkpoint.h"

ABSL_FLAG(std::string, checkpoint_dir, "",
          "Checkpoint directories, comma-separated (one shared, or each server's own).");
ABSL_FLAG(int64_t, version, -1, "export: the version to export; -1 is the newest complete one.");
ABSL_FLAG(std::string, out, "", "export: the safetensors file to write.");

namespace psync {
namespace {

constexpr char kUsage[] =
    "Usage: psync_ckpt <command> [flags]\n"
    "Commands:\n"
    "  list    each version's server files and whether each is valid (with the reason)\n"
    "  export  the full model of one version as one safetensors file, and the\n"
    "          SHA-256 of its tensor data";

int BadArguments(const std::string& what) {
  std::fprintf(stderr, "psync_ckpt: %s (see --help)\n", what.c_str());
  return 2;
}

int List(const std::vector<std::string>& dirs) {
  auto files = ListCheckpointFiles(dirs);
  if (!files.ok()) {
    std::fprintf(stderr, "psync_ckpt list: %s\n", std::string(files.status().message()).c_str());
    return 1;
  }
  if (files->empty()) {
    std::printf("no checkpoints under %s\n", absl::GetFlag(FLAGS_checkpoint_dir).c_str());
  }
  for (size_t i = 0; i < files->size();) {
    const int64_t version = (*files)[i].version;
    std::printf("version %lld\n", static_cast<long long>(version));
    std::map<int, std::map<int, bool>> sets;  // num_servers -> rank -> valid
    for (; i < files->size() && (*files)[i].version == version; ++i) {
      const CheckpointFileInfo& f = (*files)[i];
      if (f.rank < 0) {
        std::printf("  unreadable folder: %s\n", std::string(f.status.message()).c_str());
      } else if (f.status.ok()) {
        std::printf("  server %d of %d  valid    model_id=%llu  %s\n", f.rank, f.num_servers,
                    static_cast<unsigned long long>(f.model_id), f.path.c_str());
        sets[f.num_servers][f.rank] |= true;
      } else {
        std::printf("  server %d of %d  INVALID  %s\n", f.rank, f.num_servers,
                    std::string(f.status.message()).c_str());
        sets[f.num_servers][f.rank] |= false;
      }
    }
    for (const auto& [count, ranks] : sets) {
      int valid = 0;
      for (const auto& [rank, ok] : ranks) valid += ok;
      std::printf("  %d-server set: %s (%d of %d files valid)\n", count,
                  valid == count ? "complete" : "incomplete", valid, count);
    }
  }
  return 0;
}

int Export(const std::vector<std::string>& dirs) {
  const std::string out = absl::GetFlag(FLAGS_out);
  const int64_t version = absl::GetFlag(FLAGS_version);
  if (out.empty()) return BadArguments("export needs --out=FILE");
  if (version < -1) return BadArguments("--version must be >= 0, or -1 for the newest");
  // Before the work: a folder or an unwritable place fails now.
  absl::Status writable = CheckOutputPath("--out", out);
  if (!writable.ok()) return BadArguments(std::string(writable.message()));
  auto exported = ExportCheckpoint(dirs, version, out);
  if (!exported.ok()) {
    std::fprintf(stderr, "psync_ckpt export: %s\n",
                 std::string(exported.status().message()).c_str());
    return 1;
  }
  // Hash what is on disk, not what we meant to write.
  auto reader = SafetensorsReader::Open(out);
  Sha256 sha;
  absl::Status s = reader.status();
  if (s.ok()) s = reader->StreamData([&](uint64_t, const char* p, size_t n) { sha.Update(p, n); });
  if (!s.ok()) {
    std::fprintf(stderr, "psync_ckpt export: reading back: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("exported version %lld to %s\ntensor data sha256 %s\n",
              static_cast<long long>(*exported), out.c_str(), sha.HexDigest().c_str());
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // psync_ckpt reads no job flag (common/config/job_flags.h): its help lists none.
  if (PrintHelpIfRequested(argc, argv, __FILE__, /*job_flags=*/{})) return 0;
  // The positional arguments, after argv[0]: the command.
  const std::vector<char*> args = psync::ParseFlagsOrExit(argc, argv);
  if (args.size() > 2) return BadArguments(std::string("more than one command: ") + args[2]);
  const std::string command = args.size() == 2 ? args[1] : "";
  if (command == "help") {
    const std::string help = FlagsHelp(__FILE__, /*job_flags=*/{});
    std::fwrite(help.data(), 1, help.size(), stdout);
    return 0;
  }
  if (command != "list" && command != "export") {
    return BadArguments(command.empty() ? "no command: expected list or export"
                                        : "unknown command '" + command + "'");
  }
  std::vector<std::string> dirs =
      absl::StrSplit(absl::GetFlag(FLAGS_checkpoint_dir), ',', absl::SkipEmpty());
  if (dirs.empty()) return BadArguments("--checkpoint_dir=D[,D2...] is required");
  if (command == "list" && absl::GetFlag(FLAGS_out) != "") {
    return BadArguments("--out is for export only");
  }
  return command == "list" ? List(dirs) : Export(dirs);
}

}  // namespace
}  // namespace psync

int main(int argc, char** argv) { return psync::Main(argc, argv); }
