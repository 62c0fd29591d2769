#include "common/config/flags_help.h"

#include <stdlib.h>  // on_exit

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace psync {
namespace {

// CommandLineFlag does not name its type; these are the types our mains use.
const char* TypeName(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "bool";
  if (flag.IsOfType<int32_t>()) return "int32";
  if (flag.IsOfType<int64_t>()) return "int64";
  if (flag.IsOfType<uint64_t>()) return "uint64";
  if (flag.IsOfType<double>()) return "double";
  if (flag.IsOfType<float>()) return "float";
  if (flag.IsOfType<std::string>()) return "string";
  return nullptr;
}

// One line per flag of `flags`, sorted by name.
std::string Describe(std::vector<const absl::CommandLineFlag*> flags) {
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string out;
  for (const absl::CommandLineFlag* flag : flags) {
    const char* type = TypeName(*flag);
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>()) default_value = absl::StrCat("\"", default_value, "\"");
    absl::StrAppend(&out, "  --", flag->Name(), " (", type ? type : "", type ? ", " : "",
                    "default: ", default_value, ")\n      ", flag->Help(), "\n");
  }
  return out;
}

// FlagsHelp, of the job flags all (nullopt) or those named.
std::string Help(absl::string_view main_file,
                 std::optional<absl::Span<const absl::string_view>> job_flags) {
  std::vector<const absl::CommandLineFlag*> own, job;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename() == main_file) own.push_back(flag);
    if (absl::EndsWith(flag->Filename(), "common/config/job_flags.cc") &&
        (!job_flags.has_value() || absl::c_linear_search(*job_flags, name))) {
      job.push_back(flag);
    }
  }
  std::string out = absl::StrCat(absl::ProgramUsageMessage(), "\n\nFlags:\n", Describe(own));
  if (!job.empty()) {
    absl::StrAppend(&out, "\nJob configuration (--config=FILE; each flag overrides its field, "
                          "see proto/job_config.proto):\n", Describe(job));
  }
  return out;
}

// True if argv asks for help: --help, -h, --helpfull or --helpshort, with
// one dash or two, before any "--".
bool HelpRequested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;  // the rest are positional arguments
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (arg == "h" || arg == "help" || arg == "helpfull" || arg == "helpshort") return true;
  }
  return false;
}

void Print(const std::string& help) {
  std::fwrite(help.data(), 1, help.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

std::string FlagsHelp(absl::string_view main_file) { return Help(main_file, std::nullopt); }

std::string FlagsHelp(absl::string_view main_file, absl::Span<const absl::string_view> job_flags) {
  return Help(main_file, job_flags);
}

bool PrintHelpIfRequested(int argc, char** argv, absl::string_view main_file) {
  if (!HelpRequested(argc, argv)) return false;
  Print(FlagsHelp(main_file));
  return true;
}

bool PrintHelpIfRequested(int argc, char** argv, absl::string_view main_file,
                          absl::Span<const absl::string_view> job_flags) {
  if (!HelpRequested(argc, argv)) return false;
  Print(FlagsHelp(main_file, job_flags));
  return true;
}

std::vector<char*> ParseFlagsOrExit(int argc, char** argv) {
  // Abseil reports a flag it cannot parse and calls exit(1); glibc's
  // on_exit sees that status, and turns it into 2 while parsing. (Help is
  // PrintHelpIfRequested's, before this; no other exit(1) happens here.)
  static std::atomic<bool> parsing{false};
  on_exit(
      +[](int status, void*) {
        if (status == 1 && parsing.load()) _Exit(2);
      },
      nullptr);
  parsing.store(true);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  parsing.store(false);
  return args;
}

void ParseFlagsOnlyOrExit(int argc, char** argv) {
  const std::vector<char*> args = ParseFlagsOrExit(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s', expected flags only (--name=value)\n",
                 args[0], args[1]);
    std::exit(2);
  }
}

}  // namespace psync
