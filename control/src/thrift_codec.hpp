// Thrift binary encoding of single structs, for the metadata files.
#pragma once

#include <string>
#include <string_view>
#include <thrift/TBase.h>

namespace catena::control::detail {

[[nodiscard]] std::string encode(const apache::thrift::TBase& value);

// False (and value unspecified) if data is not one complete value of that
// type. Never throws.
[[nodiscard]] bool decode(std::string_view data, apache::thrift::TBase& value) noexcept;

}  // namespace catena::control::detail
