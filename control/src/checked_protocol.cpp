#include "checked_protocol.hpp"

#include <thrift/protocol/TProtocolException.h>

namespace catena::control::detail {

using apache::thrift::protocol::TProtocolException;
namespace tp = apache::thrift::protocol;

namespace {

// The types TBinaryProtocol reads and skips (its getMinSerializedSize).
tp::TType checked_type(std::int8_t byte) {
  switch (byte) {
    case tp::T_STOP:
    case tp::T_VOID:
    case tp::T_BOOL:
    case tp::T_BYTE:
    case tp::T_DOUBLE:
    case tp::T_I16:
    case tp::T_I32:
    case tp::T_I64:
    case tp::T_STRING:
    case tp::T_STRUCT:
    case tp::T_MAP:
    case tp::T_SET:
    case tp::T_LIST:
      return static_cast<tp::TType>(byte);
    default:
      throw TProtocolException(TProtocolException::INVALID_DATA,
                               "unknown type byte " + std::to_string(static_cast<int>(byte)));
  }
}

}  // namespace

uint32_t CheckedBinaryProtocol::readMessageBegin_virt(std::string& name, TMessageType& type, int32_t& seqid) {
  // Strict binary protocol only (ThriftServer and ThriftConnection ask for
  // it): version word, name, sequence id.
  int32_t word = 0;
  uint32_t n = readI32(word);
  if (word >= 0 || (word & static_cast<int32_t>(VERSION_MASK)) != static_cast<int32_t>(VERSION_1)) {
    throw TProtocolException(TProtocolException::BAD_VERSION, "bad version identifier");
  }
  const int32_t t = word & 0xff;
  if (t < tp::T_CALL || t > tp::T_ONEWAY) {
    throw TProtocolException(TProtocolException::INVALID_DATA, "unknown message type " + std::to_string(t));
  }
  type = static_cast<TMessageType>(t);
  n += readString(name);
  n += readI32(seqid);
  return n;
}

uint32_t CheckedBinaryProtocol::readFieldBegin_virt(std::string& name, TType& type, int16_t& id) {
  (void)name;
  int8_t byte = 0;
  uint32_t n = readByte(byte);
  type = checked_type(byte);
  if (type == tp::T_STOP) {
    id = 0;
    return n;
  }
  n += readI16(id);
  return n;
}

uint32_t CheckedBinaryProtocol::read_size(uint32_t& size) {
  int32_t count = 0;
  const uint32_t n = readI32(count);
  if (count < 0) throw TProtocolException(TProtocolException::NEGATIVE_SIZE);
  if (container_limit_ != 0 && count > container_limit_)
    throw TProtocolException(TProtocolException::SIZE_LIMIT);
  size = static_cast<uint32_t>(count);
  return n;
}

uint32_t CheckedBinaryProtocol::readMapBegin_virt(TType& key, TType& value, uint32_t& size) {
  int8_t k = 0;
  int8_t v = 0;
  uint32_t n = readByte(k);
  n += readByte(v);
  key = checked_type(k);
  value = checked_type(v);
  n += read_size(size);
  tp::TMap map(key, value, static_cast<int>(size));
  checkReadBytesAvailable(map);
  return n;
}

uint32_t CheckedBinaryProtocol::read_element_header(TType& element, uint32_t& size) {
  int8_t e = 0;
  const uint32_t n = readByte(e);
  element = checked_type(e);
  return n + read_size(size);
}

uint32_t CheckedBinaryProtocol::readListBegin_virt(TType& element, uint32_t& size) {
  const uint32_t n = read_element_header(element, size);
  tp::TList list(element, static_cast<int>(size));
  checkReadBytesAvailable(list);
  return n;
}

uint32_t CheckedBinaryProtocol::readSetBegin_virt(TType& element, uint32_t& size) {
  const uint32_t n = read_element_header(element, size);
  tp::TSet set(element, static_cast<int>(size));
  checkReadBytesAvailable(set);
  return n;
}

}  // namespace catena::control::detail
