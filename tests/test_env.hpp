// What every data-plane test asks of its environment: which fabric provider
// to test (env CATENA_PROVIDER, default "soft") and which address to listen
// on (env CATENA_TEST_ADDR, default 127.0.0.1; inside the soft-RoCE VM the
// rxe interface's address). CI runs the same tests on the host with the soft
// provider and in the VM on verbs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <span>
#include <string>

namespace catena::test {

inline std::string provider_spec() {
  const char* p = std::getenv("CATENA_PROVIDER");
  return p && *p ? p : "soft";
}

// host:0 — any free port on the test address.
inline std::string listen_address() {
  const char* a = std::getenv("CATENA_TEST_ADDR");
  return std::string(a && *a ? a : "127.0.0.1") + ":0";
}

// RNR NAKs the RDMA device under test has sent (a SEND or WRITE WITH
// IMMEDIATE found no posted receive), from its hardware counters; nullopt
// when the provider is not verbs or the device has no such counter (rxe has).
inline std::optional<std::uint64_t> rnr_naks_sent() {
  const std::string spec = provider_spec();
  const auto at = spec.find("verbs:");
  if (at == std::string::npos) return std::nullopt;
  std::ifstream in("/sys/class/infiniband/" + spec.substr(at + 6) + "/ports/1/hw_counters/send_rnr_err");
  std::uint64_t n = 0;
  if (!(in >> n)) return std::nullopt;
  return n;
}

inline std::span<const std::byte> bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace catena::test
