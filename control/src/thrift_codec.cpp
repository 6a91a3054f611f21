#include "thrift_codec.hpp"

#include <cstdint>
#include <memory>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "checked_protocol.hpp"

namespace catena::control::detail {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TMemoryBuffer;

std::string encode(const apache::thrift::TBase& value) {
  auto buffer = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol protocol(buffer);
  value.write(&protocol);
  return buffer->getBufferAsString();
}

bool decode(std::string_view data, apache::thrift::TBase& value) noexcept {
  try {
    // TMemoryBuffer wants a mutable pointer even for OBSERVE; it never writes.
    auto buffer = std::make_shared<TMemoryBuffer>(
        reinterpret_cast<std::uint8_t*>(const_cast<char*>(data.data())),  // NOLINT
        static_cast<std::uint32_t>(data.size()), TMemoryBuffer::OBSERVE);
    CheckedBinaryProtocol protocol(buffer);  // a record from disk or ZooKeeper: checked as any peer's
    value.read(&protocol);
    return buffer->available_read() == 0;
  } catch (...) {
    return false;
  }
}

}  // namespace catena::control::detail
