// The soft provider's arena on 2 MiB huge pages (`soft:huge=<MiB>`): the
// option is checked, the whole arena is reserved from the kernel's pool
// when the provider opens (or the open fails and says how to fix it), and
// memory handed out again reads as zeros. The pool is global: the tests
// that need one set vm.nr_hugepages (root only) and put it back.
#include <unistd.h>

#include <fstream>
#include <gtest/gtest.h>
#include <string>

#include <catena/fabric/fabric.hpp>

namespace catena::fabric::test {
namespace {

constexpr std::uint32_t kHugeRw = kLocalWrite | kRemoteWrite | kRemoteRead;

// A field of /proc/meminfo (HugePages_Total, _Free, _Rsvd), -1 if absent.
long huge_meminfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

bool set_huge_pool(long pages) {
  std::ofstream out("/proc/sys/vm/nr_hugepages");
  out << pages;
  out.close();
  return out.good() && huge_meminfo("HugePages_Total") == pages;
}

// Holds the pool at `pages` for a test, and puts back what it was.
class HugePool {
 public:
  explicit HugePool(long pages) : before_(huge_meminfo("HugePages_Total")) { ok_ = set_huge_pool(pages); }
  ~HugePool() { (void)set_huge_pool(before_); }
  HugePool(const HugePool&) = delete;
  HugePool& operator=(const HugePool&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  long before_;
  bool ok_ = false;
};

TEST(SoftHuge, TheOptionTakesMebibytesWithinBounds) {
  for (const char* spec : {"soft:huge=", "soft:huge=0", "soft:huge=63", "soft:huge=x", "soft:huge=64k",
                           "soft:huge=-1", "soft:huge=65537"}) {
    auto p = Provider::open(spec);
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_EQ(p.error().code, Errc::invalid_argument) << spec;
    EXPECT_NE(p.error().message.find("huge=<MiB>"), std::string::npos) << spec << ": " << p.error().message;
  }
  ProviderOptions kept;
  kept.keep_dir = "/tmp/catena-soft-huge-kept-" + std::to_string(getpid());
  auto p = Provider::open("soft:huge=64", kept);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Errc::invalid_argument);
  EXPECT_NE(p.error().message.find("keep"), std::string::npos) << p.error().message;
}

TEST(SoftHuge, APoolTooSmallFailsTheOpenAndSaysWhatToRaise) {
  if (geteuid() != 0) GTEST_SKIP() << "sets vm.nr_hugepages: needs root";
  const long in_use = huge_meminfo("HugePages_Total") - huge_meminfo("HugePages_Free");
  HugePool pool(in_use + 16);  // 32 MiB free, 128 MiB asked
  ASSERT_TRUE(pool.ok()) << "could not size the huge page pool";
  auto p = Provider::open("soft:shm,huge=128");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Errc::resource_exhausted);
  EXPECT_NE(p.error().message.find("vm.nr_hugepages"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("16 available"), std::string::npos) << p.error().message;
}

// Pages another arena has reserved but not touched are still "free" in
// /proc/meminfo; the error counts them as taken, which they are.
TEST(SoftHuge, PagesAnotherArenaReservedAreNotCountedAsAvailable) {
  if (geteuid() != 0) GTEST_SKIP() << "sets vm.nr_hugepages: needs root";
  const long in_use = huge_meminfo("HugePages_Total") - huge_meminfo("HugePages_Free");
  const long reserved = huge_meminfo("HugePages_Rsvd");
  HugePool pool(in_use + reserved + 48);  // 96 MiB for us: one arena of 64 MiB, not two
  ASSERT_TRUE(pool.ok()) << "could not size the huge page pool";
  auto first = Provider::open("soft:shm,huge=64");
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto second = Provider::open("soft:shm,huge=64");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::resource_exhausted);
  EXPECT_NE(second.error().message.find("16 available"), std::string::npos) << second.error().message;
}

TEST(SoftHuge, TheArenaIsReservedAtOpenAndHandsOutZeroedMemory) {
  if (geteuid() != 0) GTEST_SKIP() << "sets vm.nr_hugepages: needs root";
  const long in_use = huge_meminfo("HugePages_Total") - huge_meminfo("HugePages_Free");
  HugePool pool(in_use + 80);
  ASSERT_TRUE(pool.ok()) << "could not size the huge page pool";
  const long reserved_before = huge_meminfo("HugePages_Rsvd");
  auto opened = Provider::open("soft:shm,huge=128");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  auto& prov = *opened.value();
  // Every page of the arena is the mapping's from the start (reserved or
  // already faulted in): no later fault can find the pool empty.
  const long held = huge_meminfo("HugePages_Rsvd") - reserved_before +
                    (huge_meminfo("HugePages_Total") - huge_meminfo("HugePages_Free") - in_use);
  EXPECT_GE(held, 64) << "128 MiB is 64 pages of 2 MiB";

  constexpr std::size_t kBytes = 24u << 20;
  {
    auto mr = prov.allocate(kBytes, kHugeRw);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    std::byte* d = mr.value()->data();
    for (std::size_t i = 0; i < kBytes; i += 4096) d[i] = std::byte{0x5a};
  }
  // Freed ranges are zeroed in place (the pages stay the arena's); what is
  // allocated next reads as zeros wherever it lands.
  for (int round = 0; round < 3; ++round) {
    auto mr = prov.allocate(kBytes, kHugeRw);
    ASSERT_TRUE(mr.ok()) << mr.error().message;
    const std::byte* d = mr.value()->data();
    for (std::size_t i = 0; i < kBytes; i += 4096)
      ASSERT_EQ(d[i], std::byte{0}) << "round " << round << " at " << i;
  }
  // More than the arena holds is a clear refusal, not a fault.
  auto too_much = prov.allocate(256u << 20, kHugeRw);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.error().code, Errc::resource_exhausted);
}

}  // namespace
}  // namespace catena::fabric::test
