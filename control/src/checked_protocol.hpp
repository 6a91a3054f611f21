// The binary protocol every control-plane connection and stored record is
// read with: Thrift's TBinaryProtocol, but a type byte that names no type
// the binary protocol carries (a field's, a container's element, key or
// value type) or a message type other than call, reply, exception and
// oneway is refused with TProtocolException INVALID_DATA as it is read.
// TBinaryProtocol casts the byte to the enum as it is, and the generated
// code then switches on it: a value outside the enum is undefined
// behaviour (UBSan's -fsanitize=enum stops there), found by
// tests/fuzz/controller_request_fuzz.cpp in a request's field header.
// Everything else (size limits, the transport's bytes-available checks) is
// TBinaryProtocol's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thrift/protocol/TBinaryProtocol.h>

namespace catena::control::detail {

class CheckedBinaryProtocol final : public apache::thrift::protocol::TBinaryProtocol {
 public:
  using TType = apache::thrift::protocol::TType;
  using TMessageType = apache::thrift::protocol::TMessageType;
  using Base = apache::thrift::protocol::TBinaryProtocol;
  using Base::Base;

  uint32_t readMessageBegin_virt(std::string& name, TMessageType& type, int32_t& seqid) override;
  uint32_t readFieldBegin_virt(std::string& name, TType& type, int16_t& id) override;
  uint32_t readMapBegin_virt(TType& key, TType& value, uint32_t& size) override;
  uint32_t readListBegin_virt(TType& element, uint32_t& size) override;
  uint32_t readSetBegin_virt(TType& element, uint32_t& size) override;

 private:
  // The element count that follows a container header: not negative, within
  // the container limit.
  uint32_t read_size(uint32_t& size);
  // A list's or set's header: the element type, then the count.
  uint32_t read_element_header(TType& element, uint32_t& size);
};

}  // namespace catena::control::detail
