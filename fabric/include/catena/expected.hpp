// catena::Expected<T, E>: a value or an error, the one result type of every
// layer (C++20 has no std::expected). Each layer names its error and its
// Result once: fabric::Result<T> = Expected<T, fabric::Error>,
// control::Result<T> = Expected<T, control::ControlError>,
// client::Result<T> = Expected<T, client::Error>. An error converts into
// another layer's where that layer's error type says how (a converting
// constructor), so a fabric error returned from a client function is mapped
// once, at that boundary.
//
// E must have a `code` member whose value-initialised value means "ok".
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

namespace catena {

template <class T, class E>
class [[nodiscard]] Expected {
 public:
  using value_type = T;
  using error_type = E;
  using code_type = decltype(E::code);

  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(E err) : v_(std::in_place_index<1>, std::move(err)) {}      // NOLINT(google-explicit-constructor)
  // Another layer's error, mapped by E's converting constructor.
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, E> && !std::is_convertible_v<const F&, T> &&
           std::is_convertible_v<const F&, E>) Expected(const F& err)
      : v_(std::in_place_index<1>, E(err)) {}  // NOLINT(google-explicit-constructor)

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

  [[nodiscard]] const E& error() const { return std::get<1>(v_); }
  [[nodiscard]] code_type code() const noexcept { return ok() ? code_type{} : std::get<1>(v_).code; }

 private:
  std::variant<T, E> v_;
};

template <class E>
class [[nodiscard]] Expected<void, E> {
 public:
  using value_type = void;
  using error_type = E;
  using code_type = decltype(E::code);

  Expected() = default;
  Expected(E err) : err_(std::move(err)) {}  // NOLINT(google-explicit-constructor)
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, E> && std::is_convertible_v<const F&, E>)
      Expected(const F& err)
      : err_(E(err)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return !err_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const E& error() const { return *err_; }
  [[nodiscard]] code_type code() const noexcept { return ok() ? code_type{} : err_->code; }

 private:
  std::optional<E> err_;
};

}  // namespace catena
