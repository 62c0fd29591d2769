#include "common/rpc/placed_body.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/rpc/byte_buffer_bytes.h"
#include "common/rpc/chunk_wire.h"
#include "common/wire/byte_pieces.h"
#include "gtest/gtest.h"
#include "proto/psync.pb.h"

namespace psync {
namespace {

std::vector<float> Floats(int n, float base) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + i * 0.5f;
  return v;
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Reads `body` with ReadPlacedBody while another thread writes it in pieces
// of random sizes (the first `sent` bytes of it, then closes).
absl::StatusOr<grpc::ByteBuffer> Deliver(const std::string& body,
                                         const std::vector<AnswerPlace>& places, uint32_t seed,
                                         size_t sent) {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::thread writer([&] {
    std::mt19937 rng(seed);
    size_t pos = 0;
    while (pos < sent) {
      const size_t n = std::min<size_t>(sent - pos, 1 + rng() % 9000);
      const ssize_t put = write(fds[1], body.data() + pos, n);
      if (put <= 0) break;
      pos += static_cast<size_t>(put);
    }
    shutdown(fds[1], SHUT_WR);
  });
  absl::StatusOr<grpc::ByteBuffer> read =
      ReadPlacedBody(fds[0], body.size(), places, [] { return absl::OkStatus(); });
  writer.join();
  close(fds[0]);
  close(fds[1]);
  return read;
}

// An answer as a server builds it: scalars, then chunks 3 (float32, version
// 7, `a`), 5 (float32, version 7, `b`) and 9 (bfloat16, version 7).
std::string Answer(const std::vector<float>& a, const std::vector<float>& b) {
  WireMessageBuilder builder;
  builder.SetScalar(kWireStep, 6);
  builder.SetScalar(kWireFingerprint, 99);
  builder.AddChunk(3, proto::DTYPE_FLOAT32, 7, a.data(), a.size() * 4);
  builder.AddChunk(5, proto::DTYPE_FLOAT32, 7, b.data(), b.size() * 4);
  builder.AddChunk(9, proto::DTYPE_BFLOAT16, 7, b.data(), b.size() * 2);
  return BufferBytes(builder.Build());
}

TEST(PlacedBodyTest, ExpectedFloat32ChunksGoStraightToTheirPlace) {
  const auto a = Floats(20000, 1.0f), b = Floats(10, -3.0f);
  const std::string body = Answer(a, b);
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::vector<float> to_a(a.size(), 0.0f), to_b(b.size(), 0.0f), to_c(b.size(), 0.0f);
    const std::vector<AnswerPlace> places = {
        {3, 7, reinterpret_cast<char*>(to_a.data()), 80000},
        {5, 7, reinterpret_cast<char*>(to_b.data()), 40},
        {9, 7, reinterpret_cast<char*>(to_c.data()), 20}};  // answered in bfloat16: not placed
    absl::StatusOr<grpc::ByteBuffer> read = Deliver(body, places, seed, body.size());
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(BufferBytes(*read), body);
    EXPECT_EQ(to_a, a);
    EXPECT_EQ(to_b, b);
    EXPECT_EQ(to_c, std::vector<float>(b.size(), 0.0f));
    // The decoder's views of the placed chunks are their places.
    WireMessage m;
    ASSERT_TRUE(DecodeWireMessage(*read, 3, &m).ok());
    ASSERT_EQ(m.chunks.size(), 3u);
    ASSERT_EQ(m.chunks[0].data.size(), 1u);
    EXPECT_EQ(m.chunks[0].data[0].data(), places[0].to);
    EXPECT_EQ(m.chunks[2].version, 7);
  }
}

TEST(PlacedBodyTest, ChunksThatAreNotTheExpectedOnesStayInTheBody) {
  const auto a = Floats(3000, 1.0f), b = Floats(10, -3.0f);
  const std::string body = Answer(a, b);
  std::vector<float> to(a.size(), 0.0f);
  char* at = reinterpret_cast<char*>(to.data());
  for (const std::vector<AnswerPlace>& places :
       {std::vector<AnswerPlace>{{4, 7, at, 12000}},                     // another chunk
        std::vector<AnswerPlace>{{3, 8, at, 12000}},                     // another version
        std::vector<AnswerPlace>{{3, 7, at, 11996}},                     // another size
        std::vector<AnswerPlace>{{5, 7, at, 40}, {3, 7, at, 12000}}}) {  // another order
    absl::StatusOr<grpc::ByteBuffer> read = Deliver(body, places, 1, body.size());
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(BufferBytes(*read), body);
    EXPECT_EQ(to, std::vector<float>(a.size(), 0.0f));
  }
}

TEST(PlacedBodyTest, DataBeforeItsVersionIsNotPlaced) {
  // Protobuf's own order puts the version (field 4) after the data (3): the
  // chunk's version is not known when its data comes.
  const auto a = Floats(500, 2.0f);
  proto::PullResponse answer;
  proto::Chunk* c = answer.add_chunks();
  c->set_chunk_id(3);
  c->set_dtype(proto::DTYPE_FLOAT32);
  c->set_data(Bytes(a));
  c->set_version(7);
  const std::string body = answer.SerializeAsString();
  std::vector<float> to(a.size(), 0.0f);
  absl::StatusOr<grpc::ByteBuffer> read =
      Deliver(body, {{3, 7, reinterpret_cast<char*>(to.data()), 2000}}, 2, body.size());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(BufferBytes(*read), body);
  EXPECT_EQ(to, std::vector<float>(a.size(), 0.0f));
}

TEST(PlacedBodyTest, MalformedBodiesAreReadAsTheyAreForTheDecoderToJudge) {
  const auto a = Floats(100, 1.0f), b = Floats(10, -3.0f);
  const std::string good = Answer(a, b);
  std::vector<std::string> bodies = {
      std::string("\x2a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),  // varint too long
      std::string("\x2a\x80", 2),                                       // truncated length
      std::string("\x2a\x7f\x08\x03", 4),                               // chunk past the end
      std::string("\x2b\x01\x02", 3),                                   // wire type 3
      good.substr(0, good.size() - 7),                                  // cut short
  };
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {  // the answer with bytes changed at random
    std::string bad = good;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    bodies.push_back(bad);
  }
  std::string to(400, '\xa5');
  for (const std::string& body : bodies) {
    std::fill(to.begin(), to.end(), '\xa5');
    absl::StatusOr<grpc::ByteBuffer> read = Deliver(body, {{3, 7, to.data(), 400}}, 3, body.size());
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(BufferBytes(*read), body);
    // What was placed is what the decoder finds as that chunk's data, unless
    // it refuses the message.
    WireMessage m;
    if (to == std::string(400, '\xa5') || !DecodeWireMessage(*read, 3, &m).ok()) continue;
    ASSERT_FALSE(m.chunks.empty());
    EXPECT_EQ(m.chunks[0].id, 3);
    EXPECT_EQ(m.chunks[0].version, 7);
    ASSERT_EQ(m.chunks[0].data_size, 400);
    std::string decoded(400, '\0');
    CopyPieces(m.chunks[0].data, decoded.data());
    EXPECT_EQ(decoded, to);
  }
}

TEST(PlacedBodyTest, AConnectionThatEndsMidBodyIsAnError) {
  const auto a = Floats(20000, 1.0f), b = Floats(10, -3.0f);
  const std::string body = Answer(a, b);
  std::vector<float> to(a.size());
  for (size_t sent : {size_t{0}, size_t{5}, size_t{40000}, body.size() - 1}) {
    absl::StatusOr<grpc::ByteBuffer> read =
        Deliver(body, {{3, 7, reinterpret_cast<char*>(to.data()), 80000}}, 4, sent);
    EXPECT_TRUE(absl::IsUnavailable(read.status())) << sent << ": " << read.status();
  }
}

}  // namespace
}  // namespace psync
