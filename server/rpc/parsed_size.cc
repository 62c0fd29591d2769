#include "server/rpc/parsed_size.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace psync {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kMaxDepth = 100;  // protobuf's own recursion limit
constexpr int64_t kStringBytes = 32;

// A scalar field's size in memory.
int64_t ScalarBytes(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return 8;
    case FieldDescriptor::CPPTYPE_BOOL:
      return 1;
    default:
      return 4;
  }
}

// The elements of a packed field of `len` bytes, counted one by one.
bool CountPacked(CodedInputStream* in, const FieldDescriptor& field, uint32_t len,
                 int64_t* cost) {
  const auto limit = in->PushLimit(static_cast<int>(len));
  const int64_t element = ScalarBytes(field);
  const bool varint = field.type() != FieldDescriptor::TYPE_FIXED32 &&
                      field.type() != FieldDescriptor::TYPE_FIXED64 &&
                      field.type() != FieldDescriptor::TYPE_SFIXED32 &&
                      field.type() != FieldDescriptor::TYPE_SFIXED64 &&
                      field.type() != FieldDescriptor::TYPE_FLOAT &&
                      field.type() != FieldDescriptor::TYPE_DOUBLE;
  bool ok = true;
  if (varint) {
    while (ok && in->BytesUntilLimit() > 0) {
      uint64_t value;
      ok = in->ReadVarint64(&value);
      *cost += element;
    }
  } else {
    *cost += len;  // the same size in memory as on the wire
    ok = in->Skip(static_cast<int>(len));
  }
  in->PopLimit(limit);
  return ok;
}

// Adds the message at `in` (up to its limit) to `cost`; false if broken.
bool Walk(CodedInputStream* in, const Descriptor& type, int64_t stop_above, int depth,
          int64_t* cost) {
  if (depth > kMaxDepth) return false;
  *cost += kParsedMessageBytes;
  while (*cost <= stop_above) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->ConsumedEntireMessage();  // the end, or a broken tag
    const FieldDescriptor* field = type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t value;
        if (!in->ReadVarint64(&value)) return false;
        *cost += field != nullptr ? ScalarBytes(*field) : kStringBytes;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64:
      case WireFormatLite::WIRETYPE_FIXED32: {
        const bool wide = WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_FIXED64;
        if (!in->Skip(wide ? 8 : 4)) return false;
        *cost += field != nullptr ? ScalarBytes(*field) : kStringBytes;
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t len;
        if (!in->ReadVarint32(&len) || len > INT32_MAX) return false;
        if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE) {
          const auto limit = in->PushLimit(static_cast<int>(len));
          if (!Walk(in, *field->message_type(), stop_above, depth + 1, cost)) return false;
          if (*cost > stop_above) return true;
          in->PopLimit(limit);
        } else if (field != nullptr && field->is_repeated() &&
                   field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
          if (!CountPacked(in, *field, len, cost)) return false;
        } else {
          *cost += int64_t{len} + kStringBytes;
          if (!in->Skip(static_cast<int>(len))) return false;
        }
        break;
      }
      default:  // groups, which proto3 has not
        return false;
    }
  }
  return true;
}

}  // namespace

int64_t EstimateParsedBytes(google::protobuf::io::ZeroCopyInputStream* bytes,
                            const Descriptor& type, int64_t stop_above) {
  CodedInputStream in(bytes);
  in.SetTotalBytesLimit(INT32_MAX);
  int64_t cost = 0;
  if (!Walk(&in, type, stop_above, 0, &cost)) return -1;
  return cost;
}

}  // namespace psync
