// --help for our binaries. Debian's Abseil 20220623 filters --help output to
// flags defined in files named after the program (psync_server.cc, ...), so
// for our main.cc files it prints "No flags matched." and exits 1.
#ifndef PSYNC_COMMON_FLAGS_HELP_H_
#define PSYNC_COMMON_FLAGS_HELP_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace psync {

// The program usage message (absl::SetProgramUsageMessage) followed by every
// flag whose ABSL_FLAG definition is in `main_file` (pass __FILE__ from the
// main file), sorted by name, each with its type, default and help text.
std::string FlagsHelp(absl::string_view main_file);

// If argv asks for help (--help, -h, --helpfull, --helpshort, with one dash
// or two, before any "--"), prints FlagsHelp(main_file) to stdout and
// returns true: the caller then exits 0. Call before absl::ParseCommandLine
// and after absl::SetProgramUsageMessage.
bool PrintHelpIfRequested(int argc, char** argv, absl::string_view main_file);

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

#endif  // PSYNC_COMMON_FLAGS_HELP_H_
