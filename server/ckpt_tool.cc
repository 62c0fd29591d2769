// psync_ckpt: inspects and exports server checkpoints (format in
// server/checkpoint.h).
//   psync_ckpt list   --checkpoint_dir=D[,D2...]
//   psync_ckpt export --checkpoint_dir=D[,D2...] [--version=N] --out=FILE
// Exit status: 0 done, 1 failed, 2 bad arguments.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_split.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "server/checkpoint.h"

ABSL_FLAG(std::string, checkpoint_dir, "",
          "Checkpoint directories, comma-separated (one shared, or each server's own).");
ABSL_FLAG(int64_t, version, -1, "export: the version to export; -1 is the newest complete one.");
ABSL_FLAG(std::string, out, "", "export: the safetensors file to write.");

namespace psync {
namespace {

constexpr const char* kFlags[] = {"checkpoint_dir", "version", "out"};

void PrintHelp() {
  std::printf(
      "Usage: psync_ckpt <command> [flags]\n"
      "Commands:\n"
      "  list    each version's server files and whether each is valid (with the reason)\n"
      "  export  the full model of one version as one safetensors file, and the\n"
      "          SHA-256 of its tensor data\n"
      "Flags:\n");
  for (const char* name : kFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::printf("  --%-16s %s (default: \"%s\")\n", name, flag->Help().c_str(),
                flag->DefaultValue().c_str());
  }
  std::printf("  --%-16s %s\n", "help", "Print this text.");
}

int BadArguments(const std::string& what) {
  std::fprintf(stderr, "psync_ckpt: %s (see --help)\n", what.c_str());
  return 2;
}

// Sets the flags from argv ("--name=value" or "--name value") and returns
// the command, or the exit status in *exit_code.
std::string ParseArgs(int argc, char** argv, int* exit_code) {
  *exit_code = -1;
  std::string command;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg[0] != '-') {
      if (!command.empty()) *exit_code = BadArguments("more than one command: " + arg);
      command = arg;
      if (*exit_code >= 0) return "";
      continue;
    }
    arg = arg.substr(arg.rfind("--", 0) == 0 ? 2 : 1);
    std::string name = arg.substr(0, arg.find('=')), value;
    bool known = false;
    for (const char* f : kFlags) known |= name == f;
    if (!known) {
      *exit_code = BadArguments("unknown flag --" + name);
      return "";
    }
    if (arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      *exit_code = BadArguments("--" + name + " needs a value");
      return "";
    }
    std::string error;
    if (!absl::FindCommandLineFlag(name)->ParseFrom(value, &error)) {
      *exit_code = BadArguments("--" + name + "=" + value + ": " + error);
      return "";
    }
  }
  return command;
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
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "help") {
      PrintHelp();
      return 0;
    }
  }
  int exit_code = -1;
  const std::string command = ParseArgs(argc, argv, &exit_code);
  if (exit_code >= 0) return exit_code;
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
