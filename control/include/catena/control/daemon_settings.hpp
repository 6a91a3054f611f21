// Where a daemon's settings come from, shared by catena-controller and
// catenad: a flag, else its environment variable, else the TOML file, else
// the default (flag > environment > config file > default).
//
// Every option declared here is a command-line flag and an environment
// variable named after the flag's long name: CATENA_, upper case, '-' as
// '_' (--data-dir: CATENA_DATA_DIR, --metrics-addr: CATENA_METRICS_ADDR).
// A variable set to the empty string counts as unset. A value from the
// environment goes through the same conversion and checks as the flag's,
// and an error names the variable.
//
// Lifecycle: declare the options, app.parse(), read_environment(), then
// apply() over a Config read from defaults and the file. Main thread only.
//
// Lives in control/ beside toml_config.hpp, for the same reason: catenad
// links the control plane anyway, and control/ knows nothing of the broker.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catena/control/result.hpp>

namespace catena::control {

// The environment variable of a flag's long name ("data-dir" or "--data-dir").
[[nodiscard]] inline std::string env_name_of(std::string_view long_name) {
  while (long_name.starts_with('-')) long_name.remove_prefix(1);
  std::string env = "CATENA_";
  for (const char ch : long_name) {
    env += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  return env;
}

// The first lines of --check-config's output (TOML comments): the verdict,
// the precedence, and which variables set something.
[[nodiscard]] inline std::string checked_config_header(std::string_view program,
                                                       const std::vector<std::string>& from_environment) {
  std::string out = "# " + std::string(program) + ": configuration OK; the effective settings, as TOML\n";
  out += "# (flag > environment > config file > default); from the environment: ";
  if (from_environment.empty()) out += "nothing";
  for (std::size_t i = 0; i < from_environment.size(); ++i) out += (i == 0 ? "" : ", ") + from_environment[i];
  return out + "\n";
}

template <class Config>
class DaemonSettings {
 public:
  explicit DaemonSettings(CLI::App& app) : app_(app) {}
  DaemonSettings(const DaemonSettings&) = delete;
  DaemonSettings& operator=(const DaemonSettings&) = delete;

  // A setting of Config: flag `names` (CLI11's "-l,--listen"), TOML key
  // `key` (for messages), its variable from the long name.
  template <class T>
  CLI::Option* setting(const std::string& names, T Config::*field, std::string key, const std::string& help) {
    auto* opt = app_.add_option(names, flags_.*field, help)->capture_default_str();
    add(opt, std::move(key), [this, field](Config& c) { c.*field = flags_.*field; });
    return opt;
  }
  // A boolean setting, given as a bare flag (or the variable set to
  // true/false, 1/0, yes/no, on/off).
  CLI::Option* switch_setting(const std::string& names, bool Config::*field, std::string key,
                              const std::string& help) {
    auto* opt = app_.add_flag(names, flags_.*field, help);
    add(opt, std::move(key), [this, field](Config& c) { c.*field = flags_.*field; });
    return opt;
  }
  // An option outside Config (the config file, a port file): CLI11 writes
  // `target` itself, from the flag or the variable.
  template <class T>
  CLI::Option* option(const std::string& names, T& target, const std::string& help) {
    auto* opt = app_.add_option(names, target, help);
    add(opt, {}, {});
    return opt;
  }

  // After app.parse(): each option not given as a flag takes its variable,
  // if set. INVALID_ARGUMENT naming the variable if CLI11 refuses the value.
  [[nodiscard]] Result<void> read_environment() {
    for (auto& e : entries_) {
      if (e.opt->count() > 0) {
        e.source = e.opt->get_name();
        continue;
      }
      const char* value = std::getenv(e.env.c_str());
      if (value == nullptr || *value == '\0') continue;
      try {
        e.opt->add_result(value);
        e.opt->run_callback();
      } catch (const CLI::Error& err) {
        return invalid_argument(e.env + "=" + value + ": " + err.what());
      }
      e.source = e.env;
    }
    return {};
  }

  // The flags and variables given, over `config` (defaults and the file).
  void apply(Config& config) const {
    for (const auto& e : entries_) {
      if (!e.source.empty() && e.apply) e.apply(config);
    }
  }

  // The variables that set something ("CATENA_LISTEN", ...), in declaration order.
  [[nodiscard]] std::vector<std::string> environment_used() const {
    std::vector<std::string> used;
    for (const auto& e : entries_) {
      if (e.source == e.env) used.push_back(e.env);
    }
    return used;
  }

  // `message` (an error naming TOML keys) with where each key it names got
  // its value, when that was a flag or a variable:
  // "... (storage.segment_slots from CATENA_SEGMENT_SLOTS)".
  [[nodiscard]] std::string explain(std::string message) const {
    std::string from;
    for (const auto& e : entries_) {
      if (e.source.empty() || e.key.empty() || !names_key(message, e.key)) continue;
      from += (from.empty() ? "" : ", ") + e.key + " from " + e.source;
    }
    return from.empty() ? message : message + " (" + from + ")";
  }

 private:
  struct Entry {
    CLI::Option* opt;
    std::string env;
    std::string key;
    std::function<void(Config&)> apply;
    std::string source;  // the flag or the variable that set it; empty: neither
  };

  void add(CLI::Option* opt, std::string key, std::function<void(Config&)> apply) {
    std::string env = env_name_of(opt->get_lnames().empty() ? opt->get_name() : opt->get_lnames().front());
    opt->description(opt->get_description() + " [env " + env + "]");
    entries_.push_back({opt, std::move(env), std::move(key), std::move(apply), {}});
  }

  // Whether `key` appears in `text` as a whole word ("heartbeat_interval_ms"
  // is not in "group_heartbeat_interval_ms").
  static bool names_key(std::string_view text, std::string_view key) {
    auto word = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_'; };
    for (auto at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
      const bool starts = at == 0 || (!word(text[at - 1]) && text[at - 1] != '.');
      const bool ends = at + key.size() == text.size() || !word(text[at + key.size()]);
      if (starts && ends) return true;
    }
    return false;
  }

  CLI::App& app_;
  Config flags_;  // where CLI11 writes the settings' values
  std::vector<Entry> entries_;
};

}  // namespace catena::control
