#include "deploy/local/worker_scaling.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/format/file_util.h"

namespace psync {
namespace {

// A control file is one short line; anything longer is not one.
constexpr int64_t kMaxControlBytes = 4096;

}  // namespace

absl::StatusOr<std::optional<int>> ParseControlText(absl::string_view text,
                                                    const std::string& path, int max_workers) {
  const absl::string_view line = absl::StripAsciiWhitespace(text);
  if (line.empty()) return std::optional<int>();
  const std::string expected =
      absl::StrCat("expected one line 'workers N' with N in 1..", max_workers,
                   " (the job's max_workers)");
  const std::vector<absl::string_view> words =
      absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  int count = 0;
  if (words.size() != 2 || words[0] != "workers" || !absl::SimpleAtoi(words[1], &count)) {
    return absl::InvalidArgumentError(absl::StrCat("--control_file ", path, " holds '",
                                                   absl::CEscape(line), "', ", expected));
  }
  if (count < 1 || count > max_workers) {
    return absl::InvalidArgumentError(absl::StrCat("--control_file ", path, " asks for ", count,
                                                   " workers, ", expected));
  }
  return std::optional<int>(count);
}

bool ControlFile::Stamp::operator==(const Stamp& o) const {
  return exists == o.exists && mtime.tv_sec == o.mtime.tv_sec &&
         mtime.tv_nsec == o.mtime.tv_nsec && text == o.text;
}

ControlFile::ControlFile(std::string path) : path_(std::move(path)) {
  seen_ = Now();
  if (seen_.exists) before_ = seen_.text;
}

ControlFile::Stamp ControlFile::Now() const {
  Stamp stamp;
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) return stamp;
  stamp.exists = true;
  stamp.mtime = st.st_mtim;
  // Never blocks on a FIFO nor reads a device forever: anything but a small
  // regular file reads as its error, which ParseControlText refuses.
  absl::StatusOr<std::string> text = ReadSmallFile("--control_file", path_, kMaxControlBytes);
  stamp.text = text.ok() ? *std::move(text) : absl::StrCat("(", text.status().message(), ")");
  return stamp;
}

std::optional<std::string> ControlFile::Changed() {
  Stamp now = Now();
  if (now == seen_) return std::nullopt;
  seen_ = std::move(now);
  if (!seen_.exists) return std::nullopt;
  return seen_.text;
}

ScalePlan PlanScale(const std::vector<RankState>& ranks, int target) {
  ScalePlan plan;
  for (const RankState s : ranks) plan.from += s == RankState::kTraining;
  const int n = static_cast<int>(ranks.size());
  for (int r = 0; r < n && plan.from + static_cast<int>(plan.start.size()) < target; ++r) {
    if (ranks[r] == RankState::kOut || ranks[r] == RankState::kLeaving) plan.start.push_back(r);
  }
  for (int r = n - 1; r >= 0 && plan.from - static_cast<int>(plan.stop.size()) > target; --r) {
    if (ranks[r] == RankState::kTraining) plan.stop.push_back(r);
  }
  return plan;
}

std::string DescribeScale(const ScalePlan& plan, int target) {
  auto names = [](const std::vector<int>& ranks) {
    return absl::StrJoin(ranks, ", ", [](std::string* out, int r) {
      absl::StrAppend(out, "worker ", r);
    });
  };
  std::string line = absl::StrCat("workers ", plan.from, " -> ", target);
  if (!plan.start.empty()) absl::StrAppend(&line, ": starting ", names(plan.start));
  if (!plan.stop.empty()) {
    absl::StrAppend(&line, ": stopping ", names(plan.stop),
                    " (SIGTERM: each leaves after its step)");
  }
  // Only a rank that finished cannot start again: the job is ending.
  const int reached = plan.from + static_cast<int>(plan.start.size());
  if (reached < target) {
    absl::StrAppend(&line, plan.start.empty() ? ": " : "; ", "only ", reached,
                    " can train (the others finished)");
  } else if (plan.start.empty() && plan.stop.empty()) {
    absl::StrAppend(&line, ": nothing to change");
  }
  return line;
}

}  // namespace psync
