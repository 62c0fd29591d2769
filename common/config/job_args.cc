#include "common/config/job_args.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace psync {
namespace {

// One argument split: "--name=value" or "--name" (no value).
struct Arg {
  std::string name;
  std::optional<std::string> value;
};

absl::StatusOr<Arg> SplitArg(absl::string_view given) {
  absl::string_view arg = given;
  if (!absl::ConsumePrefix(&arg, "--") || arg.empty() || arg[0] == '-' || arg[0] == '=') {
    return absl::InvalidArgumentError(
        absl::StrCat("argument '", given, "': expected --name=value (a job flag)"));
  }
  const size_t eq = arg.find('=');
  if (eq == absl::string_view::npos) return Arg{std::string(arg), std::nullopt};
  return Arg{std::string(arg.substr(0, eq)), std::string(arg.substr(eq + 1))};
}

bool Contains(const std::vector<std::string>& names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A value-less --name (true) or --noname (false) of a boolean field.
absl::Status SetBoolean(const std::vector<std::string>& fields, const std::string& name,
                        LoadedJobConfig* loaded) {
  const bool negated = !Contains(fields, name) && absl::StartsWith(name, "no") &&
                       Contains(fields, name.substr(2));
  const std::string field = negated ? name.substr(2) : name;
  const std::string source = absl::StrCat("--", name);
  if (!Contains(fields, field)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no such job flag; expected one of the flags of "
                             "docs/configuration.md"));
  }
  if (!SetJobConfigField(field, negated ? "false" : "true", source, loaded).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " has no value; expected --", field, "=VALUE (only a boolean flag stands alone)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobArgs> ParseJobArgs(const std::vector<std::string>& args,
                                     const std::vector<std::string>& own_flags) {
  JobArgs parsed;
  std::vector<Arg> fields_given;
  std::optional<std::string> config_path;
  for (const std::string& arg : args) {
    PSYNC_ASSIGN_OR_RETURN(Arg a, SplitArg(arg));
    if (a.name == "config" || Contains(own_flags, a.name)) {
      if (!a.value.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", a.name, " has no value; expected --", a.name, "=VALUE"));
      }
      if (a.name == "config") {
        config_path = *a.value;
      } else {
        parsed.own[a.name] = *a.value;
      }
      continue;
    }
    fields_given.push_back(std::move(a));
  }
  if (config_path.has_value()) {
    PSYNC_RETURN_IF_ERROR(ReadJobConfigFile(*config_path, &parsed.loaded));
  }
  const std::vector<std::string> fields = JobConfigFieldNames();
  for (const Arg& a : fields_given) {
    if (!a.value.has_value()) {
      PSYNC_RETURN_IF_ERROR(SetBoolean(fields, a.name, &parsed.loaded));
      continue;
    }
    if (!Contains(fields, a.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", a.name, ": no such job flag; expected --config, one of the flags of "
                        "docs/configuration.md",
          own_flags.empty() ? "" : absl::StrCat(" or --", absl::StrJoin(own_flags, ", --"))));
    }
    PSYNC_RETURN_IF_ERROR(
        SetJobConfigField(a.name, *a.value, absl::StrCat("--", a.name), &parsed.loaded));
  }
  PSYNC_RETURN_IF_ERROR(FinishJobConfig(&parsed.loaded));
  return parsed;
}

}  // namespace psync
