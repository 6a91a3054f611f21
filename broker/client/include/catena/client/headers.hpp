// A record's headers (name/value byte strings: trace context, schema ids),
// as a publisher gives them (Record::headers) and a subscriber sees them
// (Message::headers). Public: the standard library only.
//
// HeaderField is laid out as chain::HeaderField (chain/record.hpp) and
// Headers reads the attributes block that file describes, in place; the
// library checks both at compile time (catena/broker/record_views.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>

namespace catena {

// One header: a name (1..256 bytes) and a value (up to 8192 bytes).
struct HeaderField {
  std::string_view name;
  std::string_view value;
  friend bool operator==(const HeaderField&, const HeaderField&) = default;
};

namespace detail {
struct HeadersAccess;
}  // namespace detail

// A delivered record's headers, read in place in the frame (no copy, no
// allocation): valid as long as the message is (during the handler).
// Iterate it (`for (const HeaderField& h : m.headers)`) or find(name).
class Headers {
 public:
  class iterator {
   public:
    using value_type = HeaderField;
    using difference_type = std::ptrdiff_t;
    using pointer = const HeaderField*;
    using reference = const HeaderField&;
    using iterator_category = std::forward_iterator_tag;

    iterator() = default;
    reference operator*() const noexcept { return cur_; }
    pointer operator->() const noexcept { return &cur_; }
    iterator& operator++() noexcept {
      at_ += 4 + cur_.name.size() + cur_.value.size();
      --left_;
      load();
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator was = *this;
      ++*this;
      return was;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.left_ == b.left_; }

   private:
    friend class Headers;
    iterator(const std::byte* at, std::uint16_t left) noexcept : at_(at), left_(left) { load(); }
    // Per header: u16 name length, u16 value length (little-endian), the
    // name, the value; the library validated every length.
    void load() noexcept {
      if (left_ == 0) return;
      std::uint16_t n = 0;
      std::uint16_t v = 0;
      std::memcpy(&n, at_, 2);
      std::memcpy(&v, at_ + 2, 2);
      const auto* text = reinterpret_cast<const char*>(at_ + 4);
      cur_ = HeaderField{{text, n}, {text + n, v}};
    }
    const std::byte* at_ = nullptr;
    std::uint16_t left_ = 0;
    HeaderField cur_{};
  };

  Headers() = default;
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] iterator begin() const noexcept { return {at_, count_}; }
  [[nodiscard]] iterator end() const noexcept { return {}; }
  // The value of the first header called `name`.
  [[nodiscard]] std::optional<std::string_view> find(std::string_view name) const noexcept {
    for (const HeaderField& f : *this)
      if (f.name == name) return f.value;
    return std::nullopt;
  }

 private:
  friend struct detail::HeadersAccess;
  Headers(const std::byte* at, std::uint16_t count) noexcept : at_(at), count_(count) {}
  const std::byte* at_ = nullptr;
  std::uint16_t count_ = 0;
};

}  // namespace catena
