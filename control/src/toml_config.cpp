#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <sstream>
#include <toml++/toml.h>

#include <catena/control/toml_config.hpp>

namespace catena::control {
namespace {

constexpr const char* kTypeNames[] = {"a string", "an integer", "a boolean"};

std::optional<TomlValue> value_of(const toml::node& node, std::size_t type) {
  switch (type) {
    case 0:
      if (auto v = node.value<std::string>(); node.is_string() && v) return TomlValue{*v};
      break;
    case 1:
      if (auto v = node.value<std::int64_t>(); node.is_integer() && v) return TomlValue{*v};
      break;
    case 2:
      if (auto v = node.value<bool>(); node.is_boolean() && v) return TomlValue{*v};
      break;
  }
  return std::nullopt;
}

bool is_table_prefix(const std::vector<TomlKey>& keys, std::string_view path) {
  for (const auto& k : keys) {
    if (k.path.size() > path.size() && k.path.starts_with(path) && k.path[path.size()] == '.') return true;
  }
  return false;
}

Result<void> apply_table(const std::vector<TomlKey>& keys, const toml::table& table,
                         const std::string& prefix, std::string_view source, void* config) {
  for (const auto& [name, node] : table) {
    const std::string path =
        prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    if (node.is_table() && is_table_prefix(keys, path)) {
      if (auto r = apply_table(keys, *node.as_table(), path, source, config); !r) return r;
      continue;
    }
    auto it = std::find_if(keys.begin(), keys.end(), [&](const TomlKey& k) { return k.path == path; });
    if (it == keys.end()) return invalid_argument(fmt::format("{}: unknown key '{}'", source, path));
    auto v = value_of(node, it->type);
    if (!v)
      return invalid_argument(fmt::format("{}: key '{}': expected {}", source, path, kTypeNames[it->type]));
    if (auto why = it->set(*v, config); !why.empty()) {
      return invalid_argument(fmt::format("{}: key '{}': {}", source, path, why));
    }
  }
  return {};
}

}  // namespace

TextRule one_of(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](std::string_view s) -> std::string {
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return {};
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return fmt::format("'{}' is not one of {}", s, list);
  };
}

TextRule log_level_rule() {
  return one_of({std::begin(kLogLevels), std::end(kLogLevels)});
}

namespace detail {

Result<void> apply_toml(const std::vector<TomlKey>& keys, std::string_view text, std::string_view source,
                        void* config) {
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return invalid_argument(
        fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
  // Keys are applied one by one into `config`: TomlSchema passes a copy.
  return apply_table(keys, table, "", source, config);
}

Result<void> check(const std::vector<TomlKey>& keys, std::string_view source, void* config) {
  for (const auto& k : keys) {
    if (auto why = k.set(k.get(config), config); !why.empty()) {
      return invalid_argument(fmt::format("{}: key '{}': {}", source, k.path, why));
    }
  }
  return {};
}

std::string to_toml(const std::vector<TomlKey>& keys, const void* config) {
  toml::table root;
  for (const auto& k : keys) {
    toml::table* t = &root;
    std::string_view rest = k.path;
    for (auto dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
      auto it = t->emplace<toml::table>(std::string(rest.substr(0, dot))).first;
      t = it->second.as_table();
      rest.remove_prefix(dot + 1);
    }
    std::visit([&](const auto& v) { t->insert_or_assign(std::string(rest), v); }, k.get(config));
  }
  std::stringstream out;
  out << root << "\n";
  return out.str();
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument(fmt::format("cannot read config file {}", path.string()));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace detail
}  // namespace catena::control
