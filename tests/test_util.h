// Helpers shared by the multi-process tests.
#ifndef PSYNC_TESTS_TEST_UTIL_H_
#define PSYNC_TESTS_TEST_UTIL_H_

#include <cstdlib>
#include <string>

namespace psync {

// Path of a binary in this test's runfiles, e.g. Runfile("server/psync_server").
inline std::string Runfile(const std::string& path) {
  const char* dir = std::getenv("TEST_SRCDIR");
  return std::string(dir ? dir : ".") + "/psync/" + path;
}

inline std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

}  // namespace psync

#endif  // PSYNC_TESTS_TEST_UTIL_H_
