// SHA-256 (FIPS 180-4), for fingerprints of exported weights.
#ifndef PSYNC_COMMON_FORMAT_SHA256_H_
#define PSYNC_COMMON_FORMAT_SHA256_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace psync {

// Incremental hasher. Not thread-safe.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  // Lower-case hex digest. Ends the hash: call once.
  std::string HexDigest();

 private:
  void Block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace psync

#endif  // PSYNC_COMMON_FORMAT_SHA256_H_
