// The provider conformance suite's fixture: a connected pair of endpoints
// on the provider CATENA_PROVIDER names, and helpers to wait for their
// completions. Shared by the suite's files.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <future>
#include <gtest/gtest.h>
#include <numeric>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catena/fabric/fabric.hpp>

#include "fabric_test_util.hpp"

namespace catena::fabric::test {

using namespace std::chrono_literals;

class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = Provider::open(provider_spec());
    ASSERT_TRUE(p.ok()) << "cannot open provider '" << provider_spec() << "': " << p.error().message;
    provider_ = std::move(p.value());
    auto pair = connect_pair(*provider_, *provider_, cfg_);
    ASSERT_TRUE(pair.ok()) << "cannot connect: " << pair.error().message;
    pair_ = std::move(pair.value());
  }

  std::unique_ptr<MemoryRegion> alloc(std::size_t size, std::uint32_t access) {
    auto mr = provider_->allocate(size, access);
    EXPECT_TRUE(mr.ok()) << mr.error().message;
    return mr.ok() ? std::move(mr.value()) : nullptr;
  }

  Endpoint& client() { return *pair_.client; }
  Endpoint& server() { return *pair_.server; }

  // The key the server end gives its peer, the client, for `mr`.
  RemoteRegion grant(const MemoryRegion& mr) {
    auto r = server().expose(mr);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r.value() : RemoteRegion{};
  }

  EndpointConfig cfg_{};
  std::unique_ptr<Provider> provider_;
  EndpointPair pair_;
};

inline void fill(MemoryRegion& mr, std::size_t off, std::size_t len, std::uint8_t seed) {
  for (std::size_t i = 0; i < len; ++i)
    mr.data()[off + i] = std::byte(static_cast<std::uint8_t>(seed + i * 7));
}

inline bool check(const MemoryRegion& mr, std::size_t off, std::size_t len, std::uint8_t seed) {
  for (std::size_t i = 0; i < len; ++i) {
    if (mr.data()[off + i] != std::byte(static_cast<std::uint8_t>(seed + i * 7))) return false;
  }
  return true;
}

inline bool all_zero(const MemoryRegion& mr) {
  return std::all_of(mr.data(), mr.data() + mr.size(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace catena::fabric::test
