// MetadataStore: exact replay, snapshots, and what happens to damaged files.
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <catena/control/metadata_store.hpp>
#include <catena/control/wal.hpp>

#include "test_support.hpp"

namespace catena::control {
namespace {

using testing::TempDir;

meta::MetaRecord node_record(int i) {
  meta::NodeRecord n;
  n.info.__set_node_id("node-" + std::to_string(i));
  n.info.__set_admin_addr("h" + std::to_string(i) + ":7000");
  n.info.__set_fabric_addr("h" + std::to_string(i) + ":9000");
  n.info.__set_zone(i % 2 == 0 ? "z0" : "z1");
  n.__set_node_epoch(i);
  n.__set_dead(false);
  meta::MetaRecord r;
  r.__set_put_node(n);
  r.__set_next_node_epoch(i + 1);
  return r;
}

meta::MetaRecord channel_record(const std::string& name) {
  meta::ChannelRecord ch;
  ch.config = testing::channel_config(name, 2, 2);
  for (int p = 0; p < 2; ++p) {
    idl::PartitionRoute route;
    route.__set_channel(name);
    route.__set_partition(p);
    route.__set_epoch(1);
    for (int k = 0; k < 2; ++k) {
      idl::Replica rep;
      rep.__set_node_id("node-" + std::to_string(k));
      route.replicas.push_back(rep);
    }
    ch.routes.push_back(route);
  }
  meta::MetaRecord r;
  r.__set_put_channel(ch);
  return r;
}

meta::MetaRecord route_bump(const meta::MetaState& state, const std::string& name, int partition) {
  auto route = state.channels.at(name).routes.at(static_cast<std::size_t>(partition));
  route.__set_epoch(route.epoch + 1);
  route.replicas.pop_back();
  meta::MetaRecord r;
  r.__set_put_routes({route});
  return r;
}

std::unique_ptr<DirMetadataStore> open_store(const std::filesystem::path& dir,
                                             std::uint64_t snapshot_every = 1000) {
  auto s = DirMetadataStore::open({dir, snapshot_every});
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().describe());
  return s.ok() ? std::move(*s) : nullptr;
}

// Commits a varied history; returns the state after each record.
std::vector<meta::MetaState> write_history(MetadataStore& store) {
  std::vector<meta::MetaState> states;
  auto commit = [&](const meta::MetaRecord& r) {
    auto res = store.commit(r);
    ASSERT_TRUE(res.ok()) << res.error().describe();
    states.push_back(store.state());
  };
  for (int i = 0; i < 3; ++i) commit(node_record(i));
  commit(channel_record("orders"));
  commit(route_bump(store.state(), "orders", 1));
  meta::RepairIntent intent;
  intent.__set_id(1);
  intent.__set_node_id("node-1");
  intent.__set_node_epoch(1);
  intent.__set_reason("test");
  meta::MetaRecord begin;
  begin.__set_begin_repair(intent);
  begin.__set_next_intent_id(2);
  commit(begin);
  meta::MetaRecord end;
  end.__set_end_repair(1);
  commit(end);
  return states;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const std::filesystem::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
}

TEST(MetadataStore, ReplayReproducesStateExactly) {
  TempDir dir;
  std::vector<meta::MetaState> states;
  {
    auto store = open_store(dir.path());
    states = write_history(*store);
    EXPECT_EQ(store->last_lsn(), states.size());
  }
  auto store = open_store(dir.path());
  EXPECT_EQ(store->state(), states.back());
  EXPECT_EQ(store->recovery().replayed_records, states.size());
  EXPECT_EQ(store->recovery().dropped_tail_bytes, 0u);
  EXPECT_EQ(store->state().nodes.size(), 3u);
  EXPECT_EQ(store->state().channels.at("orders").routes[1].epoch, 2);
  EXPECT_TRUE(store->state().intents.empty());
  EXPECT_EQ(store->state().next_intent_id, 2);
}

TEST(MetadataStore, SnapshotsAndLogReplayCombine) {
  TempDir dir;
  std::vector<meta::MetaState> states;
  {
    auto store = open_store(dir.path(), /*snapshot_every=*/3);
    states = write_history(*store);  // 7 records: snapshots after 3 and 6, one record in the log
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "snapshot"));
  auto store = open_store(dir.path(), 3);
  EXPECT_TRUE(store->recovery().had_snapshot);
  EXPECT_EQ(store->recovery().snapshot_lsn, 6u);
  EXPECT_EQ(store->recovery().replayed_records, 1u);
  EXPECT_EQ(store->state(), states.back());
  EXPECT_EQ(store->last_lsn(), 7u);
}

TEST(MetadataStore, CrashBetweenSnapshotAndLogResetReplaysOnlyNewerRecords) {
  TempDir dir;
  meta::MetaState expected;
  {
    auto store = open_store(dir.path());
    write_history(*store);
    const std::string full_log = read_file(dir.path() / "wal");
    ASSERT_TRUE(store->snapshot().ok());
    // Put the pre-snapshot log back, as if the crash hit before it was emptied.
    write_file(dir.path() / "wal", full_log);
    expected = store->state();
  }
  {
    auto store = open_store(dir.path());
    EXPECT_EQ(store->recovery().replayed_records, 0u);
    EXPECT_EQ(store->state(), expected);
    ASSERT_TRUE(store->commit(node_record(9)).ok());
    expected = store->state();
  }
  auto store = open_store(dir.path());
  EXPECT_EQ(store->state(), expected);
}

// A MetaRecord putting channel `name` as a controller from before
// PartitionRoute.joining (field 6) wrote it: routes carry fields 1-5 only.
std::string record_without_joining(const std::string& name) {
  using namespace apache::thrift::protocol;
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  TBinaryProtocol out(buffer);
  out.writeStructBegin("MetaRecord");
  out.writeFieldBegin("put_channel", T_STRUCT, 2);
  out.writeStructBegin("ChannelRecord");
  out.writeFieldBegin("config", T_STRUCT, 1);
  testing::channel_config(name, 1, 2).write(&out);
  out.writeFieldEnd();
  out.writeFieldBegin("routes", T_LIST, 2);
  out.writeListBegin(T_STRUCT, 1);
  out.writeStructBegin("PartitionRoute");
  out.writeFieldBegin("channel", T_STRING, 1);
  out.writeString(name);
  out.writeFieldEnd();
  out.writeFieldBegin("partition", T_I32, 2);
  out.writeI32(0);
  out.writeFieldEnd();
  out.writeFieldBegin("epoch", T_I64, 3);
  out.writeI64(7);
  out.writeFieldEnd();
  out.writeFieldBegin("replicas", T_LIST, 4);
  out.writeListBegin(T_STRUCT, 2);
  for (int k = 0; k < 2; ++k) {
    idl::Replica rep;
    rep.__set_node_id("node-" + std::to_string(k));
    rep.write(&out);
  }
  out.writeListEnd();
  out.writeFieldEnd();
  out.writeFieldBegin("start_offset", T_I64, 5);
  out.writeI64(0);
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeListEnd();
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  return buffer->getBufferAsString();
}

TEST(MetadataStore, RoutesWrittenBeforeTheJoiningFieldLoadWithNoneJoining) {
  TempDir dir;
  {
    auto wal = WalWriter::open(dir.path() / "wal", 0);
    ASSERT_TRUE(wal.ok()) << wal.error().describe();
    ASSERT_TRUE(wal->append(1, record_without_joining("legacy")).ok());
  }
  meta::MetaState expected;
  {
    auto store = open_store(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(store->recovery().replayed_records, 1u);
    const auto& route = store->state().channels.at("legacy").routes.at(0);
    EXPECT_EQ(route.epoch, 7);
    ASSERT_EQ(route.replicas.size(), 2u);
    EXPECT_EQ(route.replicas[1].node_id, "node-1");
    EXPECT_TRUE(route.joining.empty());
    // The same store takes a route with a joining replica from here on.
    idl::PartitionRoute next = route;
    next.__set_epoch(8);
    idl::Replica joiner;
    joiner.__set_node_id("node-2");
    next.joining.push_back(joiner);
    meta::MetaRecord r;
    r.__set_put_routes({next});
    ASSERT_TRUE(store->commit(r).ok());
    ASSERT_TRUE(store->snapshot().ok());
    expected = store->state();
  }
  auto store = open_store(dir.path());
  EXPECT_EQ(store->state(), expected);
  const auto& route = store->state().channels.at("legacy").routes.at(0);
  ASSERT_EQ(route.joining.size(), 1u);
  EXPECT_EQ(route.joining[0].node_id, "node-2");
}

TEST(MetadataStore, TruncatedTailIsDroppedAndLogStaysAppendable) {
  TempDir dir;
  std::vector<meta::MetaState> states;
  {
    auto store = open_store(dir.path());
    states = write_history(*store);
  }
  const auto wal = dir.path() / "wal";
  std::filesystem::resize_file(wal, std::filesystem::file_size(wal) - 5);  // tear the last record
  meta::MetaState after;
  {
    auto store = open_store(dir.path());
    EXPECT_EQ(store->state(), states[states.size() - 2]);
    EXPECT_GT(store->recovery().dropped_tail_bytes, 0u);
    ASSERT_TRUE(store->commit(node_record(7)).ok());
    after = store->state();
  }
  auto store = open_store(dir.path());
  EXPECT_EQ(store->recovery().dropped_tail_bytes, 0u);
  EXPECT_EQ(store->state(), after);
  EXPECT_EQ(store->state().nodes.count("node-7"), 1u);
}

TEST(MetadataStore, GarbageAfterLastRecordIsDropped) {
  TempDir dir;
  std::vector<meta::MetaState> states;
  {
    auto store = open_store(dir.path());
    states = write_history(*store);
  }
  std::mt19937 rng(42);
  std::string junk(300, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  write_file(dir.path() / "wal", read_file(dir.path() / "wal") + junk);
  auto store = open_store(dir.path());
  EXPECT_EQ(store->state(), states.back());
  EXPECT_EQ(store->recovery().dropped_tail_bytes, junk.size());
}

TEST(MetadataStore, ZeroFilledTailIsDropped) {
  TempDir dir;
  std::vector<meta::MetaState> states;
  {
    auto store = open_store(dir.path());
    states = write_history(*store);
  }
  write_file(dir.path() / "wal", read_file(dir.path() / "wal") + std::string(4096, '\0'));
  auto store = open_store(dir.path());
  EXPECT_EQ(store->state(), states.back());
}

TEST(MetadataStore, CorruptLastRecordIsTreatedAsTornTail) {
  TempDir dir;
  std::vector<meta::MetaState> states;
  {
    auto store = open_store(dir.path());
    states = write_history(*store);
  }
  auto data = read_file(dir.path() / "wal");
  data[data.size() - 2] ^= 0x5A;  // inside the last record's payload
  write_file(dir.path() / "wal", data);
  auto store = open_store(dir.path());
  EXPECT_EQ(store->state(), states[states.size() - 2]);
}

TEST(MetadataStore, CorruptionInTheMiddleIsRefused) {
  TempDir dir;
  {
    auto store = open_store(dir.path());
    write_history(*store);
  }
  auto data = read_file(dir.path() / "wal");
  data[40] ^= 0x01;  // inside the first record; intact records follow
  write_file(dir.path() / "wal", data);
  auto store = DirMetadataStore::open({dir.path(), 1000});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.code(), idl::ErrorCode::INTERNAL);
  EXPECT_NE(store.error().message.find("corrupt record"), std::string::npos) << store.error().message;
}

TEST(MetadataStore, DamagedSnapshotIsRefused) {
  TempDir dir;
  {
    auto store = open_store(dir.path());
    write_history(*store);
    ASSERT_TRUE(store->snapshot().ok());
  }
  auto data = read_file(dir.path() / "snapshot");
  data[data.size() / 2] ^= 0x10;
  write_file(dir.path() / "snapshot", data);
  auto store = DirMetadataStore::open({dir.path(), 1000});
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("damaged"), std::string::npos) << store.error().message;
}

TEST(MetadataStore, OneOpenPerDirectory) {
  TempDir dir;
  auto first = open_store(dir.path());
  auto second = DirMetadataStore::open({dir.path(), 1000});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message.find("in use"), std::string::npos);
  first.reset();
  EXPECT_TRUE(DirMetadataStore::open({dir.path(), 1000}).ok());
}

// What a restarted controller commands brokers with must outrank what it
// commanded them with before (they refuse older epochs), through the log
// and through a snapshot.
TEST(MetadataStore, EveryControllerEpochTakenIsNewerThanTheOnesBefore) {
  TempDir dir;
  std::int64_t last = 0;
  for (int open = 0; open < 3; ++open) {
    auto store = open_store(dir.path(), /*snapshot_every=*/2);
    ASSERT_NE(store, nullptr);
    auto epoch = store->take_controller_epoch();
    ASSERT_TRUE(epoch.ok()) << epoch.error().describe();
    EXPECT_EQ(*epoch, last + 1) << "open " << open;
    EXPECT_EQ(store->state().controller_epoch, *epoch);
    last = *epoch;
    ASSERT_TRUE(store->commit(node_record(open)).ok());  // and a snapshot at times
  }
}

TEST(Wal, RecordsRoundTripAndLsnsMustBeContiguous) {
  TempDir dir;
  const auto path = dir.path() / "log";
  {
    auto w = WalWriter::open(path, 0);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(1, "one").ok());
    ASSERT_TRUE(w->append(2, "").ok());
    ASSERT_TRUE(w->append(3, std::string(100000, 'x')).ok());
  }
  auto c = read_wal(path);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->records.size(), 3u);
  EXPECT_EQ(c->records[0].payload, "one");
  EXPECT_EQ(c->records[1].payload, "");
  EXPECT_EQ(c->records[2].payload.size(), 100000u);
  {
    auto w = WalWriter::open(path, c->valid_bytes);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(5, "gap").ok());
  }
  auto gap = read_wal(path);
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.error().message.find("lsn 5 after lsn 3"), std::string::npos) << gap.error().message;
}

}  // namespace
}  // namespace catena::control
