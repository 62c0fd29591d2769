#include "common/wire/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

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
  auto wrong_nonce = SharedRegion::Open(offer);
  ASSERT_FALSE(wrong_nonce.ok());
  EXPECT_THAT(wrong_nonce.status().message(), HasSubstr("nonce differs"));
  offer = (*created)->offer();
  offer.bytes = 4096;
  auto wrong_size = SharedRegion::Open(offer);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_THAT(wrong_size.status().message(), HasSubstr("8192 bytes, offered 4096"));
}

TEST(SharedRegionTest, RefusesAFileThatIsNotASealedRegion) {
  char path[] = "/tmp/shared_region_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  SharedRegion::Offer offer = OfferOf(fd);
  auto opened = SharedRegion::Open(offer);
  close(fd);
  unlink(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.status().message(), HasSubstr("expected a memory file /memfd:psync-shared"));
}

// Not opened at all: a device, or a memory file that is not a psync region.
TEST(SharedRegionTest, OpensOnlyPsyncMemoryFiles) {
  const int null_fd = open("/dev/null", O_RDWR);
  ASSERT_GE(null_fd, 0);
  SharedRegion::Offer offer = OfferOf(null_fd);
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("it is '/dev/null'"));
  close(null_fd);
  const int other = memfd_create("other", MFD_ALLOW_SEALING);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, 8192), 0);
  offer.fd = other;
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("'/memfd:other"));
  close(other);
}

TEST(SharedRegionTest, RefusesAnUnsealedRegion) {
  const int fd = memfd_create("psync-shared", MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  SharedRegion::Offer offer = OfferOf(fd);
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("not sealed"));
  close(fd);
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
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("cannot open"));
  offer.bytes = 0;
  EXPECT_THAT(SharedRegion::Open(offer).status().message(), HasSubstr("expected 1 to"));
  EXPECT_FALSE(SharedRegion::Create(-1).ok());
}

}  // namespace
}  // namespace psync
