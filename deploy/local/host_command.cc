#include "deploy/local/host_command.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace psync {
namespace {

// The wrapper (POSIX sh; dash runs it). $1 the job configuration's text,
// $2 the pid file, $3 the directory to run in, $4 the nice value, $5 the
// seconds from the end of its input to SIGKILL; then the process's argv.
// Background commands of a shell without job control read /dev/null, so
// the input watcher gets the real one through fd 3. The process gets
// neither: only the watcher reads the launcher's lines.
constexpr char kWrapper[] = R"(cd "$3" 2>/dev/null ||
  echo "psync_launch: this host has no directory $3; running in $PWD" >&2
d=$(mktemp -d "${TMPDIR:-/tmp}/psync_host.XXXXXX") || exit 1
printf '%s' "$1" >"$d/job.pbtxt" || exit 1
pf=$2 n=$4 g=$5
shift 5
exec 3<&0
nice -n "$n" "$@" "--config=$d/job.pbtxt" </dev/null 3<&- &
p=$!
if [ -n "$pf" ]; then
  mkdir -p "${pf%/*}" && echo "$p" >"$pf.tmp" && mv -f "$pf.tmp" "$pf"
fi
(
  while read -r s; do kill -s "$s" "$p"; done
  kill -s TERM "$p"; sleep "$g"; kill -s KILL "$p"
) <&3 >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"; c=$?
kill "$w" 2>/dev/null
rm -rf "$d"
exit "$c")";

// A word no shell changes, and that is not NAME=value, which a shell reads
// as an assignment where a command's first word is expected.
bool IsPlainWord(absl::string_view word) {
  for (const char c : word) {
    if (!absl::ascii_isalnum(c) && !absl::StrContains("_@%+=:,./-", c)) return false;
  }
  const absl::string_view name = word.substr(0, word.find('='));
  const bool assignment = name.size() < word.size() && !name.empty() &&
                          !absl::ascii_isdigit(name[0]) &&
                          std::all_of(name.begin(), name.end(), [](char c) {
                            return absl::ascii_isalnum(c) || c == '_';
                          });
  return !word.empty() && !assignment;
}

}  // namespace

absl::Status ValidateHostCommand(absl::string_view host_cmd) {
  const std::string expected =
      "expected a command that runs its last argument (a shell command line) on the host "
      "{host}, e.g. 'ssh {host}' or 'ip netns exec {host} sh -c'";
  if (!absl::StrContains(host_cmd, "{host}")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_cmd is '", host_cmd, "' without {host}: ", expected));
  }
  for (size_t brace = host_cmd.find('{'); brace != host_cmd.npos;
       brace = host_cmd.find('{', brace + 1)) {
    if (!absl::StartsWith(host_cmd.substr(brace), "{host}")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host_cmd is '", host_cmd, "': its only placeholder is {host}, ",
                       "found '", host_cmd.substr(brace, 12), "'"));
    }
  }
  // Commands that exec their last argument rather than hand it to a shell
  // as ssh does: without a shell at the end the whole command line would
  // be taken for a program's name.
  const std::vector<absl::string_view> words =
      absl::StrSplit(host_cmd, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  constexpr absl::string_view kExecers[] = {"ip", "nsenter", "docker", "podman", "kubectl",
                                            "chroot"};
  const bool execer =
      std::find(std::begin(kExecers), std::end(kExecers), words.front()) != std::end(kExecers);
  if (execer && words.back() != "-c") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host_cmd is '", host_cmd, "': ", words.front(),
        " runs its last argument as a program, not as a shell command line as ssh does; ",
        "end the template with a shell, e.g. '", host_cmd, " sh -c'"));
  }
  // The wrapper on the host reads its orders from its standard input, and
  // stops its process when that ends: these pass it on only when asked.
  constexpr absl::string_view kNeedInteractive[] = {"docker", "podman", "kubectl"};
  const bool needs_i = std::find(std::begin(kNeedInteractive), std::end(kNeedInteractive),
                                 words.front()) != std::end(kNeedInteractive);
  const bool interactive = std::any_of(words.begin(), words.end(), [](absl::string_view w) {
    return w == "-i" || w == "-it" || w == "-ti" || w == "--interactive" ||
           w == "--interactive=true";
  });
  if (needs_i && !interactive) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host_cmd is '", host_cmd, "': ", words.front(),
        " exec passes its standard input on only with -i, and each process's wrapper reads its "
        "orders there (its end stops the process at once); add -i, e.g. '", words.front(),
        " exec -i {host} sh -c'"));
  }
  return absl::OkStatus();
}

std::string ShellQuote(absl::string_view word) {
  if (IsPlainWord(word)) return std::string(word);
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

std::string ShellCommandLine(const std::vector<std::string>& words) {
  return absl::StrJoin(words, " ", [](std::string* out, const std::string& word) {
    out->append(ShellQuote(word));
  });
}

std::vector<std::string> HostCommandArgv(absl::string_view host_cmd, absl::string_view host,
                                         absl::string_view command_line) {
  const std::string command = absl::StrReplaceAll(host_cmd, {{"{host}", ShellQuote(host)}});
  return {"/bin/sh", "-c", absl::StrCat("exec ", command, " ", ShellQuote(command_line))};
}

std::string HostProcessCommandLine(const HostProcess& process) {
  std::vector<std::string> words = {"/bin/sh",
                                    "-c",
                                    kWrapper,
                                    "psync-host",
                                    process.job_config,
                                    process.pid_file,
                                    process.cwd,
                                    absl::StrCat(process.nice),
                                    absl::StrCat(process.kill_after_s)};
  words.insert(words.end(), process.argv.begin(), process.argv.end());
  return ShellCommandLine(words);
}

}  // namespace psync
