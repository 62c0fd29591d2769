#include "common/wire/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What every refused offer gets: one answer, naming nothing.
absl::Status Unusable() {
  return absl::FailedPreconditionError(
      "the offered shared memory is not usable: the offered descriptor cannot be taken, or it "
      "is not a sealed psync memory region of the offered size and nonce (shared memory needs "
      "the worker on this host, in this server's pid namespace, as a user whose descriptors the "
      "server may take)");
}

// An offer of descriptor `fd` of this process, for 4096 bytes.
SharedRegion::Offer OfferOf(int fd) {
  SharedRegion::Offer offer;
  offer.pid = getpid();
  offer.fd = fd;
  offer.nonce = 1;
  offer.bytes = 4096;
  return offer;
}

TEST(SharedRegionTest, BothMappingsSeeTheSameBytes) {
  auto created = SharedRegion::Create(3 * 4096 + 5);
  ASSERT_TRUE(created.ok()) << created.status();
  auto opened = SharedRegion::Open((*created)->offer());
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), 3 * 4096 + 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*created)->data()) % 4096, 0u);
  (*created)->data()[0] = 7;
  (*created)->data()[3 * 4096 + 4] = 9;
  (*opened)->data()[100] = 11;
  EXPECT_EQ((*opened)->data()[0], 7);
  EXPECT_EQ((*opened)->data()[3 * 4096 + 4], 9);
  EXPECT_EQ((*created)->data()[100], 11);
}

TEST(SharedRegionTest, ClosedDescriptorCannotBeOpenedAgain) {
  auto created = SharedRegion::Create(4096);
  ASSERT_TRUE(created.ok()) << created.status();
  const SharedRegion::Offer offer = (*created)->offer();
  (*created)->CloseDescriptor();
  auto opened = SharedRegion::Open(offer);
  EXPECT_FALSE(opened.ok());
  (*created)->data()[1] = 1;  // the creator's mapping stays
}

TEST(SharedRegionTest, RefusesAnotherNonceOrSize) {
  auto created = SharedRegion::Create(8192);
  ASSERT_TRUE(created.ok()) << created.status();
  SharedRegion::Offer offer = (*created)->offer();
  offer.nonce ^= 1;
  EXPECT_EQ(SharedRegion::Open(offer).status(), Unusable());
  offer = (*created)->offer();
  offer.bytes = 4096;
  EXPECT_EQ(SharedRegion::Open(offer).status(), Unusable());
}

// Finding 3's bind-mount trick, emulated: a file a peer holds read-only
// and named like a region (a root-only file bind-mounted as
// /memfd:psync-shared) must not become writable in the server, however
// genuine it looks; here it is a real region, with the right nonce.
TEST(SharedRegionTest, ARegionOfferedReadOnlyIsNotMappedForWriting) {
  auto created = SharedRegion::Create(4096);
  ASSERT_TRUE(created.ok()) << created.status();
  SharedRegion::Offer offer = (*created)->offer();
  const int read_only = open(absl::StrCat("/proc/self/fd/", offer.fd).c_str(), O_RDONLY);
  ASSERT_GE(read_only, 0);
  offer.fd = read_only;
  EXPECT_EQ(SharedRegion::Open(offer).status(), Unusable());
  close(read_only);
}

// A regular file named like a region, and a tmpfs file that cannot be
// sealed: refused without echoing their names.
TEST(SharedRegionTest, RefusesAFileThatIsNotASealedRegion) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  // Named by this process, so that runs side by side (or one stopped before
  // its unlink) never meet in /dev/shm.
  const std::string own = absl::StrCat("-", getpid());
  for (const std::string& path :
       {dir + "/memfd:psync-shared" + own, "/dev/shm/memfd:psync-shared-test" + own}) {
    unlink(path.c_str());  // a previous process's with this pid
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(ftruncate(fd, 8192), 0);
    const absl::Status refused = SharedRegion::Open(OfferOf(fd)).status();
    close(fd);
    unlink(path.c_str());
    EXPECT_EQ(refused, Unusable()) << path;
  }
}

TEST(SharedRegionTest, RefusesDevicesAndUnsealedMemoryFiles) {
  const int null_fd = open("/dev/null", O_RDWR);
  ASSERT_GE(null_fd, 0);
  EXPECT_EQ(SharedRegion::Open(OfferOf(null_fd)).status(), Unusable());
  close(null_fd);
  const int fd = memfd_create("psync-shared", MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  EXPECT_EQ(SharedRegion::Open(OfferOf(fd)).status(), Unusable());
  close(fd);
}

// A hugetlbfs region could raise SIGBUS in the server when no huge page is
// left: refused even when sealed and of the right size.
TEST(SharedRegionTest, RefusesAHugetlbRegion) {
  const int fd = memfd_create("psync-shared", MFD_HUGETLB | MFD_ALLOW_SEALING);
  if (fd < 0) GTEST_SKIP() << "this kernel makes no hugetlb memory files";
  const int64_t huge_page = int64_t{2} << 20;
  ASSERT_EQ(ftruncate(fd, huge_page), 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  SharedRegion::Offer offer = OfferOf(fd);
  offer.bytes = huge_page - 4096;
  EXPECT_EQ(SharedRegion::Open(offer).status(), Unusable());
  close(fd);
}

// Finding 3's descriptor probing: another process's stdin, a descriptor it
// does not have, and a process that no longer exists all get one answer.
TEST(SharedRegionTest, ProbingOtherProcessesLearnsNothing) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[1]);
    char byte;
    // Until the test closes its end (or dies): bounded by the test.
    _exit(read(pipe_fds[0], &byte, 1) < 0 ? 1 : 0);
  }
  close(pipe_fds[0]);
  const pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  std::vector<absl::Status> answers;
  for (const auto& [pid, fd] : {std::pair<pid_t, int>{child, 0}, {child, 1 << 20},
                                {getpid(), 0}, {getpid(), 1 << 20}, {gone, 0}}) {
    SharedRegion::Offer offer = OfferOf(fd);
    offer.pid = pid;
    answers.push_back(SharedRegion::Open(offer).status());
  }
  close(pipe_fds[1]);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  for (const absl::Status& answer : answers) EXPECT_EQ(answer, Unusable());
  EXPECT_THAT(answers[0].message(), Not(HasSubstr(absl::StrCat(child))));
}

TEST(SharedRegionTest, ARegionPastTheFileSizeLimitIsRefusedNotSignalled) {
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  auto created = SharedRegion::Create(1 << 20);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ASSERT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("file size limit"));
}

TEST(SharedRegionTest, RefusesBadOffers) {
  SharedRegion::Offer offer;
  offer.pid = 0;
  offer.fd = 3;
  offer.bytes = 4096;
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("process id > 0"));
  offer.pid = getpid();
  offer.fd = 1 << 20;  // not open
  EXPECT_EQ(SharedRegion::Open(offer).status(), Unusable());
  offer.bytes = 0;
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("expected 1 to"));
  EXPECT_FALSE(SharedRegion::Create(-1).ok());
}

}  // namespace
}  // namespace psync
