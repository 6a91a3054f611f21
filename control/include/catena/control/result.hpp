// Error values for the control plane. The controller core, the broker-admin
// seam and ControllerClient return these; only the Thrift edges translate
// them to and from the CatenaError exception on the wire.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <catena/control/idl/catena_types.h>

namespace catena::control {

using ErrorCode = idl::ErrorCode::type;

[[nodiscard]] std::string_view code_name(ErrorCode code) noexcept;

// An error with its wire code, a message for people and, for STALE_EPOCH,
// the route the refusing side holds so the caller can go there directly.
struct ControlError {
  ErrorCode code = idl::ErrorCode::INTERNAL;
  std::string message;
  std::optional<idl::PartitionRoute> current_route;

  [[nodiscard]] idl::CatenaError to_thrift() const;
  [[nodiscard]] static ControlError from_thrift(const idl::CatenaError& e);
  [[nodiscard]] std::string describe() const;  // "STALE_EPOCH: message"
};

[[nodiscard]] inline ControlError make_error(ErrorCode code, std::string message) {
  return ControlError{code, std::move(message), std::nullopt};
}

// Minimal expected<T, ControlError> (C++20 has no std::expected).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(ControlError err) : v_(std::move(err)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // By value from a temporary, so `for (auto& x : *f())` cannot dangle.
  T operator*() && { return std::move(value()); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  [[nodiscard]] const ControlError& error() const { return std::get<1>(v_); }
  [[nodiscard]] ErrorCode code() const noexcept { return ok() ? idl::ErrorCode::OK : std::get<1>(v_).code; }

 private:
  std::variant<T, ControlError> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(ControlError err) : err_(std::move(err)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return !err_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const ControlError& error() const { return *err_; }
  [[nodiscard]] ErrorCode code() const noexcept { return ok() ? idl::ErrorCode::OK : err_->code; }

 private:
  std::optional<ControlError> err_;
};

}  // namespace catena::control
