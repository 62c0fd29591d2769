#include "common/rpc/chunk_wire.h"

#include <random>

#include "common/rpc/byte_buffer_bytes.h"
#include "gtest/gtest.h"
#include "proto/psync.pb.h"

namespace psync {
namespace {

// `bytes` cut into pieces at random places, as gRPC may deliver it.
grpc::ByteBuffer Split(const std::string& bytes, std::mt19937& rng) {
  std::vector<grpc::Slice> slices;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - pos, 1 + rng() % 7);
    slices.emplace_back(bytes.data() + pos, n);
    pos += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<float> Floats(int n, float base) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + i * 0.5f;
  return v;
}

TEST(ChunkWireTest, BuilderOutputIsTheProtobufMessage) {
  const auto a = Floats(5, 1.0f), b = Floats(300, -2.0f);
  WireMessageBuilder builder;
  builder.SetScalar(kWireWorkerRank, 3);
  builder.SetScalar(kWireFingerprint, -7);  // uint64 with the top bit set
  builder.SetScalar(kWireStep, 123456789012);
  builder.SetScalar(kWireSampleCount, 64);
  builder.AddChunk(0, 1, 0, a.data(), a.size() * 4);
  auto owner = std::make_shared<std::vector<float>>(b);
  builder.AddChunk(17, 1, 9, owner->data(), owner->size() * 4, owner);
  const std::string bytes = BufferBytes(builder.Build());

  proto::PushRequest push;
  ASSERT_TRUE(push.ParseFromString(bytes));
  EXPECT_EQ(push.worker_rank(), 3);
  EXPECT_EQ(push.layout_fingerprint(), static_cast<uint64_t>(-7));
  EXPECT_EQ(push.step(), 123456789012);
  EXPECT_EQ(push.sample_count(), 64);
  ASSERT_EQ(push.chunks_size(), 2);
  EXPECT_EQ(push.chunks(0).chunk_id(), 0);
  EXPECT_EQ(push.chunks(0).data(), std::string(reinterpret_cast<const char*>(a.data()), 20));
  EXPECT_EQ(push.chunks(1).chunk_id(), 17);
  EXPECT_EQ(push.chunks(1).version(), 9);
  EXPECT_EQ(push.chunks(1).data().size(), 1200u);
  proto::PullResponse pull;
  ASSERT_TRUE(pull.ParseFromString(bytes));
  EXPECT_EQ(pull.chunks_size(), 2);
}

TEST(ChunkWireTest, DecodesProtobufBytesSplitAnywhere) {
  std::mt19937 rng(1);
  proto::PushRequest push;
  push.set_worker_rank(-1);
  push.set_layout_fingerprint(0xfedcba9876543210ULL);
  push.set_step(77);
  push.set_sample_count(5);
  push.set_shared_slot(3);
  push.set_in_shared_model(true);
  const auto a = Floats(33, 0.25f);
  for (int id : {4, 0, 1000000}) {
    proto::Chunk* c = push.add_chunks();
    c->set_chunk_id(id);
    c->set_dtype(proto::DTYPE_FLOAT32);
    c->set_data(std::string(reinterpret_cast<const char*>(a.data()), a.size() * 4));
    c->set_version(id + 1);
  }
  const std::string bytes = push.SerializeAsString();
  for (int trial = 0; trial < 50; ++trial) {
    WireMessage m;
    ASSERT_TRUE(DecodeWireMessage(Split(bytes, rng), 3, &m).ok());
    EXPECT_EQ(m.Int(kWireWorkerRank), -1);
    EXPECT_EQ(m.scalars[kWireFingerprint], 0xfedcba9876543210ULL);
    EXPECT_EQ(m.Int(kWireStep), 77);
    EXPECT_EQ(m.Int(kWireSampleCount), 5);
    EXPECT_EQ(m.Int(kWireSharedSlot), 3);
    EXPECT_EQ(m.Int(kWireInSharedModel), 1);
    ASSERT_EQ(m.chunks.size(), 3u);
    EXPECT_EQ(m.chunks[2].id, 1000000);
    EXPECT_EQ(m.chunks[2].version, 1000001);
    EXPECT_EQ(m.chunks[1].dtype, proto::DTYPE_FLOAT32);
    std::vector<float> out(33);
    ASSERT_EQ(m.chunks[0].data_size, 132);
    CopyPieces(m.chunks[0].data, out.data());
    EXPECT_EQ(out, a);
  }
}

TEST(ChunkWireTest, BoundsTheChunkCountAndRejectsWhatProtobufWould) {
  // 1000 empty chunks (2 bytes each) against a limit of 10.
  std::string many;
  for (int i = 0; i < 1000; ++i) many += std::string("\x2a\x00", 2);
  grpc::Slice s(many.data(), many.size());
  WireMessage m;
  absl::Status st = DecodeWireMessage(grpc::ByteBuffer(&s, 1), 10, &m);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("more than 10 chunks"), std::string::npos) << st;
  EXPECT_LE(m.chunks.size(), 10u);
  // Field number 2^32 + 5 must not be read as field 5.
  const std::string big_field = "\xaa\x80\x80\x80\x80\x01\x00";
  grpc::Slice b(big_field.data(), big_field.size());
  EXPECT_FALSE(DecodeWireMessage(grpc::ByteBuffer(&b, 1), 10, &m).ok());
  // A chunk whose data field appears twice.
  const std::string twice = "\x2a\x06\x1a\x01x\x1a\x01y";
  grpc::Slice t(twice.data(), twice.size());
  EXPECT_FALSE(DecodeWireMessage(grpc::ByteBuffer(&t, 1), 10, &m).ok());
}

TEST(ChunkWireTest, SkipsUnknownFields) {
  proto::Chunk c;
  c.set_chunk_id(2);
  std::string bytes;
  bytes += static_cast<char>(9 << 3 | 0);  // field 9, varint
  bytes += static_cast<char>(0x96);
  bytes += static_cast<char>(0x01);
  bytes += static_cast<char>(10 << 3 | 5);  // field 10, fixed32
  bytes += std::string(4, 'x');
  bytes += static_cast<char>(5 << 3 | 2);
  bytes += static_cast<char>(c.ByteSizeLong());
  bytes += c.SerializeAsString();
  grpc::Slice s(bytes.data(), bytes.size());
  WireMessage m;
  ASSERT_TRUE(DecodeWireMessage(grpc::ByteBuffer(&s, 1), 10, &m).ok());
  ASSERT_EQ(m.chunks.size(), 1u);
  EXPECT_EQ(m.chunks[0].id, 2);
}

TEST(ChunkWireTest, MalformedInputNeverCrashes) {
  proto::PushRequest push;
  push.set_step(3);
  proto::Chunk* c = push.add_chunks();
  c->set_chunk_id(1);
  c->set_data(std::string(64, 'a'));
  const std::string bytes = push.SerializeAsString();
  int errors = 0;
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    grpc::Slice s(bytes.data(), cut);
    WireMessage m;
    absl::Status st = DecodeWireMessage(grpc::ByteBuffer(&s, 1), 10, &m);
    if (!st.ok()) {
      ++errors;
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find("malformed message at byte"), std::string::npos) << st;
    }
  }
  EXPECT_GT(errors, 0);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string garbage(rng() % 40, '\0');
    for (char& ch : garbage) ch = static_cast<char>(rng());
    grpc::Slice s(garbage.data(), garbage.size());
    WireMessage m;
    (void)DecodeWireMessage(grpc::ByteBuffer(&s, 1), 10, &m);  // must not crash
  }
  const std::string huge_length = std::string(1, 5 << 3 | 2) + "\xff\xff\xff\xff\x0f";
  grpc::Slice s(huge_length.data(), huge_length.size());
  WireMessage m;
  EXPECT_FALSE(DecodeWireMessage(grpc::ByteBuffer(&s, 1), 10, &m).ok());
}

}  // namespace
}  // namespace psync
