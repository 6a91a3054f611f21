#include "shared_provider.hpp"

#include <unistd.h>

#include <map>
#include <string>

#include <catena/fabric/thread_annotations.hpp>

namespace catena::client_detail {

namespace {

struct Entry {
  std::weak_ptr<fabric::Provider> provider;
  pid_t pid = 0;  // the process that opened it
};

struct Registry {
  Mutex mu;
  std::map<std::string, Entry, std::less<>> by_spec GUARDED_BY(mu);
};

Registry& registry() {
  // Never destroyed: clients destroyed by static destructors may still look.
  static auto* r = new Registry;
  return *r;
}

}  // namespace

fabric::Result<std::shared_ptr<fabric::Provider>> shared_provider(std::string_view spec) {
  auto& r = registry();
  // Opening runs under the lock: two clients asking at once for a spec
  // must not both open it (two huge-page arenas, two EAL ports).
  MutexLock lock(r.mu);
  const pid_t pid = ::getpid();
  auto it = r.by_spec.find(spec);
  if (it != r.by_spec.end() && it->second.pid == pid) {
    if (auto p = it->second.provider.lock()) return p;
  }
  auto opened = fabric::Provider::open(spec);
  if (!opened) return opened.error();
  std::shared_ptr<fabric::Provider> p = std::move(opened.value());
  r.by_spec.insert_or_assign(std::string(spec), Entry{p, pid});
  return p;
}

}  // namespace catena::client_detail
