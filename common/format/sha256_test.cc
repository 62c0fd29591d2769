#include "common/format/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace psync {
namespace {

std::string Hash(const std::string& s) {
  Sha256 h;
  h.Update(s.data(), s.size());
  return h.HexDigest();
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Hash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hash(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  std::string data(1000, 'x');
  for (int i = 0; i < 1000; ++i) data[i] = static_cast<char>(i * 7);
  Sha256 h;
  for (size_t i = 0; i < data.size(); i += 37) h.Update(data.data() + i, std::min<size_t>(37, data.size() - i));
  EXPECT_EQ(h.HexDigest(), Hash(data));
}

}  // namespace
}  // namespace psync
