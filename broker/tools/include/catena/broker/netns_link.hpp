// NetnsLink: a network namespace joined to the host by one veth pair, so a
// test can cut a process off the network and heal it again.
//
// The host end of the pair has host_addr(), the namespace end inner_addr()
// (a /24 of 10.77.0.0/16 no interface of the host uses yet). A process
// started under exec_prefix() runs inside the namespace: it reaches the host,
// and the host reaches it, only over the pair. cut() takes the namespace end
// down: the host's packets to it are dropped in silence (no reset, no
// unreachable), as in a real partition, and the process sees its network
// gone. heal() brings it back up.
//
// Lifecycle: create() builds the namespace and the pair with iproute2's `ip`
// (needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN); the destructor deletes
// both. Stop the processes inside first: they keep the namespace alive until
// they exit. A test process that died without its destructor leaves its
// namespace behind; the next create() removes such leftovers (and stops
// their processes).
//
// Used by the failover tests and by `catena chaos` (one namespace per
// process).
//
// Thread: one owner; not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace catena {

class NetnsLink {
 public:
  // Null, with the reason in *why, when this machine or user cannot create
  // a namespace (no `ip`, no privilege).
  static std::unique_ptr<NetnsLink> create(std::string* why);
  ~NetnsLink();
  NetnsLink(const NetnsLink&) = delete;
  NetnsLink& operator=(const NetnsLink&) = delete;

  [[nodiscard]] const std::string& name() const { return ns_; }
  [[nodiscard]] const std::string& host_addr() const { return host_addr_; }
  [[nodiscard]] const std::string& inner_addr() const { return inner_addr_; }
  // Command prefix that runs a program inside the namespace, in place (ip
  // netns exec execs it; it does not fork).
  [[nodiscard]] std::vector<std::string> exec_prefix() const;

  // Takes the namespace end of the pair down / up again; false with
  // iproute2's message in *error.
  bool cut(std::string* error);
  bool heal(std::string* error);

  // A second veth pair into the same namespace, on a /24 of its own, so a
  // process inside can be reached over two links and a test can cut one:
  // the hosts' processes that talk to it over the second pair lose it, the
  // others do not. False with the reason in *error.
  bool add_second_link(std::string* error);
  [[nodiscard]] const std::string& second_host_addr() const { return second_.host_addr; }
  [[nodiscard]] const std::string& second_inner_addr() const { return second_.inner_addr; }
  bool cut_second(std::string* error);
  bool heal_second(std::string* error);

 private:
  NetnsLink() = default;

  struct Pair {
    std::string host_if;
    std::string inner_if;
    std::string host_addr;
    std::string inner_addr;
    bool created = false;
  };

  std::string ns_;
  std::string host_if_;
  std::string inner_if_;
  std::string host_addr_;
  std::string inner_addr_;
  bool ns_created_ = false;
  bool link_created_ = false;
  Pair second_;
};

}  // namespace catena
