// --help for our binaries. Debian's Abseil 20220623 filters --help output to
// flags defined in files named after the program (psync_server.cc, ...), so
// for our main.cc files it prints "No flags matched." and exits 1.
#ifndef PSYNC_COMMON_CONFIG_FLAGS_HELP_H_
#define PSYNC_COMMON_CONFIG_FLAGS_HELP_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace psync {

// The program usage message (absl::SetProgramUsageMessage) followed by every
// flag whose ABSL_FLAG definition is in `main_file` (pass __FILE__ from the
// main file), then the job flags (common/config/job_flags.h) linked into the
// program, each list sorted by name, each flag with its type, default and
// help text.
std::string FlagsHelp(absl::string_view main_file);
// The same, but of the job flags only those named in `job_flags`: those the
// program reads (psync_ctl: where the servers are and how to reach them),
// not the training's. Empty: none.
std::string FlagsHelp(absl::string_view main_file, absl::Span<const absl::string_view> job_flags);

// If argv asks for help (--help, -h, --helpfull, --helpshort, with one dash
// or two, before any "--"), prints FlagsHelp(main_file) (or
// FlagsHelp(main_file, job_flags)) to stdout and returns true: the caller
// then exits 0. Call before absl::ParseCommandLine and after
// absl::SetProgramUsageMessage.
bool PrintHelpIfRequested(int argc, char** argv, absl::string_view main_file);
bool PrintHelpIfRequested(int argc, char** argv, absl::string_view main_file,
                          absl::Span<const absl::string_view> job_flags);

// absl::ParseCommandLine, except that a flag it cannot parse (unknown, or a
// value of the wrong type) exits 2, our code for bad flags, which
// supervisors (psync_launch, Kubernetes) take as final, rather than
// Abseil's 1, which they restart. Abseil's message comes first, as before.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

// ParseFlagsOrExit for a program that takes flags only: an argument that is
// not a flag (a typo such as `-- lr=0.1`, a value after a space) exits 2,
// naming it, rather than being ignored.
void ParseFlagsOnlyOrExit(int argc, char** argv);

}  // namespace psync

#endif  // PSYNC_COMMON_CONFIG_FLAGS_HELP_H_
