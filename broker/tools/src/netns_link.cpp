#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <sys/wait.h>

#include <catena/broker/netns_link.hpp>

extern char** environ;

namespace catena {
namespace {

constexpr const char* kNsPrefix = "catena-cut-";

// Runs argv (looked up in PATH) to completion. True if it exited 0; its
// stdout and stderr end up in *output either way.
bool run(const std::vector<std::string>& args, std::string* output) {
  output->clear();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *output = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    *output = args[0] + ": " + std::strerror(rc);
    return false;
  }
  char buf[512];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      output->append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string command_line(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// `ip <args>`; false with the command and its message in *error.
bool ip(std::vector<std::string> args, std::string* error) {
  args.insert(args.begin(), "ip");
  std::string out;
  if (run(args, &out)) return true;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  *error = "`" + command_line(args) + "`: " + out;
  return false;
}

std::string host_if_for(long pid) {
  return "catcut" + std::to_string(pid) + "h";
}

std::string second_host_if_for(long pid) {
  return "catcut" + std::to_string(pid) + "H";
}

// Namespaces (and their veth pairs and processes) left by test processes
// that no longer exist.
void remove_leftovers() {
  std::string list;
  if (!run({"ip", "netns", "list"}, &list)) return;
  std::istringstream lines(list);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind(kNsPrefix, 0) != 0) continue;
    const long owner = std::strtol(name.c_str() + std::strlen(kNsPrefix), nullptr, 10);
    if (owner <= 0 || owner == getpid() || kill(static_cast<pid_t>(owner), 0) == 0 || errno != ESRCH)
      continue;
    std::string pids;
    if (run({"ip", "netns", "pids", name}, &pids)) {
      std::istringstream in(pids);
      long pid = 0;
      while (in >> pid) {
        if (pid > 0) kill(static_cast<pid_t>(pid), SIGKILL);
      }
    }
    std::string ignored;
    (void)ip({"link", "del", host_if_for(owner)}, &ignored);
    (void)ip({"link", "del", second_host_if_for(owner)}, &ignored);
    (void)ip({"netns", "del", name}, &ignored);
  }
}

// A /24 of 10.77.0.0/16 that no address or route of the host mentions yet,
// starting from one derived from the pid so concurrent test processes
// rarely collide.
std::string free_subnet() {
  std::string addrs;
  std::string routes;
  (void)run({"ip", "-o", "-4", "addr", "show"}, &addrs);
  (void)run({"ip", "-4", "route", "show", "table", "all"}, &routes);
  // Every address or route starts a line or follows a blank.
  std::string in_use = "\n" + addrs + "\n" + routes;
  for (char& c : in_use) {
    if (c == '\n') c = ' ';
  }
  const int start = static_cast<int>(getpid() % 250);
  for (int i = 0; i < 250; ++i) {
    const std::string prefix = "10.77." + std::to_string(1 + (start + i) % 250) + ".";
    if (in_use.find(" " + prefix) == std::string::npos) return prefix;
  }
  return {};
}

}  // namespace

std::unique_ptr<NetnsLink> NetnsLink::create(std::string* why) {
  remove_leftovers();
  std::unique_ptr<NetnsLink> link(new NetnsLink());
  const long pid = getpid();
  link->ns_ = kNsPrefix + std::to_string(pid);
  link->host_if_ = host_if_for(pid);
  link->inner_if_ = "catcut" + std::to_string(pid) + "n";
  const std::string subnet = free_subnet();
  if (subnet.empty()) {
    *why = "no free /24 in 10.77.0.0/16";
    return nullptr;
  }
  link->host_addr_ = subnet + "1";
  link->inner_addr_ = subnet + "2";

  std::string error;
  if (!ip({"netns", "add", link->ns_}, &error)) {
    *why = "cannot create a network namespace: " + error;
    return nullptr;
  }
  link->ns_created_ = true;
  if (!ip({"link", "add", link->host_if_, "type", "veth", "peer", "name", link->inner_if_, "netns",
           link->ns_},
          &error)) {
    *why = "cannot create a veth pair: " + error;
    return nullptr;
  }
  link->link_created_ = true;
  const bool up =
      ip({"addr", "add", link->host_addr_ + "/24", "dev", link->host_if_}, &error) &&
      ip({"link", "set", link->host_if_, "up"}, &error) &&
      ip({"-n", link->ns_, "addr", "add", link->inner_addr_ + "/24", "dev", link->inner_if_}, &error) &&
      ip({"-n", link->ns_, "link", "set", link->inner_if_, "up"}, &error) &&
      ip({"-n", link->ns_, "link", "set", "lo", "up"}, &error);
  if (!up) {
    *why = "cannot configure the veth pair: " + error;
    return nullptr;
  }
  // ip netns exec also needs a mount namespace of its own (it remounts /sys).
  if (!ip({"netns", "exec", link->ns_, "true"}, &error)) {
    *why = "cannot run a program in the namespace: " + error;
    return nullptr;
  }
  return link;
}

NetnsLink::~NetnsLink() {
  std::string ignored;
  // Deleting one end deletes the pair.
  if (second_.created) (void)ip({"link", "del", second_.host_if}, &ignored);
  if (link_created_) (void)ip({"link", "del", host_if_}, &ignored);
  if (ns_created_) (void)ip({"netns", "del", ns_}, &ignored);
}

std::vector<std::string> NetnsLink::exec_prefix() const {
  return {"ip", "netns", "exec", ns_};
}

bool NetnsLink::cut(std::string* error) {
  return ip({"-n", ns_, "link", "set", inner_if_, "down"}, error);
}

bool NetnsLink::heal(std::string* error) {
  return ip({"-n", ns_, "link", "set", inner_if_, "up"}, error);
}

bool NetnsLink::add_second_link(std::string* error) {
  const long pid = getpid();
  second_.host_if = second_host_if_for(pid);
  second_.inner_if = "catcut" + std::to_string(pid) + "N";
  const std::string subnet = free_subnet();
  if (subnet.empty()) {
    *error = "no free /24 in 10.77.0.0/16";
    return false;
  }
  second_.host_addr = subnet + "1";
  second_.inner_addr = subnet + "2";
  if (!ip({"link", "add", second_.host_if, "type", "veth", "peer", "name", second_.inner_if, "netns", ns_},
          error)) {
    return false;
  }
  second_.created = true;
  return ip({"addr", "add", second_.host_addr + "/24", "dev", second_.host_if}, error) &&
         ip({"link", "set", second_.host_if, "up"}, error) &&
         ip({"-n", ns_, "addr", "add", second_.inner_addr + "/24", "dev", second_.inner_if}, error) &&
         ip({"-n", ns_, "link", "set", second_.inner_if, "up"}, error);
}

bool NetnsLink::cut_second(std::string* error) {
  return ip({"-n", ns_, "link", "set", second_.inner_if, "down"}, error);
}

bool NetnsLink::heal_second(std::string* error) {
  return ip({"-n", ns_, "link", "set", second_.inner_if, "up"}, error);
}

}  // namespace catena
