// Strict TOML configuration, shared by catena-controller and catenad: every
// key is declared once with its field, its type and its rule. An unknown key,
// a wrong type or a value its rule refuses is an error naming the key and the
// file, and a failed overlay changes nothing. The effective configuration
// prints as TOML that reads back to the same values (`--print-config`).
//
// Keys are dotted paths: "log.level" is key `level` of table `[log]`.
// Only strings, integers and booleans; no arrays.
//
// Lives in control/ (target catena_control) so the controller and catenad,
// the composition root that links the control plane anyway, share it
// without control/ knowing anything of the broker.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <catena/control/result.hpp>

namespace catena::control {

using TomlValue = std::variant<std::string, std::int64_t, bool>;

// One key, type-erased over the configuration struct (set/get take it as
// void*). TomlSchema below builds these; use that.
struct TomlKey {
  std::string path;
  std::size_t type;  // index of the TomlValue alternative it takes
  // Checks the value and stores it; returns why it was refused, or "".
  std::function<std::string(const TomlValue&, void* config)> set;
  std::function<TomlValue(const void* config)> get;
};

// The log levels spdlog takes, which both daemons accept.
inline constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                                  "error", "critical", "off"};

// A rule for a string value: returns why it is refused, or "".
using TextRule = std::function<std::string(std::string_view)>;
[[nodiscard]] TextRule one_of(std::vector<std::string> allowed);
[[nodiscard]] TextRule log_level_rule();

namespace detail {
[[nodiscard]] Result<void> apply_toml(const std::vector<TomlKey>& keys, std::string_view text,
                                      std::string_view source, void* config);
[[nodiscard]] Result<void> check(const std::vector<TomlKey>& keys, std::string_view source, void* config);
[[nodiscard]] std::string to_toml(const std::vector<TomlKey>& keys, const void* config);
[[nodiscard]] Result<std::string> read_file(const std::filesystem::path& path);
}  // namespace detail

template <class Config>
class TomlSchema {
 public:
  TomlSchema& text(std::string path, std::string Config::*field, TextRule rule = {}) {
    keys_.push_back({std::move(path), 0,
                     [field, rule = std::move(rule)](const TomlValue& v, void* c) -> std::string {
                       const auto& s = std::get<std::string>(v);
                       if (rule) {
                         if (auto why = rule(s); !why.empty()) return why;
                       }
                       static_cast<Config*>(c)->*field = s;
                       return {};
                     },
                     [field](const void* c) -> TomlValue { return static_cast<const Config*>(c)->*field; }});
    return *this;
  }

  template <std::integral I>
  requires(!std::same_as<I, bool>) TomlSchema& integer(
      std::string path, I Config::*field, std::int64_t min = std::numeric_limits<I>::min(),
      std::int64_t max = static_cast<std::int64_t>(std::min<std::uint64_t>(std::numeric_limits<I>::max(),
                                                                           INT64_MAX))) {
    keys_.push_back({std::move(path), 1,
                     [field, min, max](const TomlValue& v, void* c) -> std::string {
                       const auto n = std::get<std::int64_t>(v);
                       if (n < min || n > max) {
                         return "must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                                std::to_string(n);
                       }
                       static_cast<Config*>(c)->*field = static_cast<I>(n);
                       return {};
                     },
                     [field](const void* c) -> TomlValue {
                       return static_cast<std::int64_t>(static_cast<const Config*>(c)->*field);
                     }});
    return *this;
  }

  TomlSchema& boolean(std::string path, bool Config::*field) {
    keys_.push_back({std::move(path), 2,
                     [field](const TomlValue& v, void* c) -> std::string {
                       static_cast<Config*>(c)->*field = std::get<bool>(v);
                       return {};
                     },
                     [field](const void* c) -> TomlValue { return static_cast<const Config*>(c)->*field; }});
    return *this;
  }

  // Overlays the keys present in `text` (read from `source`, for messages).
  // A refused key leaves `config` as it was.
  [[nodiscard]] Result<void> apply(std::string_view text, std::string_view source, Config& config) const {
    Config next = config;
    auto r = detail::apply_toml(keys_, text, source, &next);
    if (r) config = std::move(next);
    return r;
  }
  [[nodiscard]] Result<void> apply_file(const std::filesystem::path& path, Config& config) const {
    auto text = detail::read_file(path);
    if (!text) return text.error();
    return apply(*text, path.string(), config);
  }
  // Every key's rule on the current values (those set by flags too);
  // `source` says where they came from, for the message.
  [[nodiscard]] Result<void> check(const Config& config, std::string_view source = "configuration") const {
    Config scratch = config;  // rules run through the setters
    return detail::check(keys_, source, &scratch);
  }
  [[nodiscard]] std::string to_toml(const Config& config) const { return detail::to_toml(keys_, &config); }

 private:
  std::vector<TomlKey> keys_;
};

}  // namespace catena::control
