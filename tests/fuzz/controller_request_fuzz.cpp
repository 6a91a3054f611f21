// The controller's request path fed anything: each input is one frame as a
// ControllerServer connection reads it (the same TMemoryBuffer with the
// wire's TConfiguration, the same strict CheckedBinaryProtocol with its
// string and container limits, thrift_server.cpp), decoded by the generated code
// and answered by the same handler (make_connection_processor) over a real
// Controller (its log + snapshot store in a temporary directory, four
// brokers that accept whatever they are told, a manual clock). The first
// byte picks the connection: even, an open cluster (the caller is the
// admin); odd, a closed one (admin token "fuzz-admin-token"): every call
// but authenticate is refused until a token is given.
//
// Properties, beyond the sanitizers': a request that decodes is answered
// with a reply (a result or a declared CatenaError), never with a
// TApplicationException other than "unknown method" (that is what a
// handler's stray std::exception becomes: bad input must get a clear
// error); and a reply always decodes. Every 256 inputs the controller
// starts again on an empty store, so that what earlier inputs created does
// not grow without bound.
//
// Seeds: `CATENA_FUZZ_WRITE_SEEDS=DIR catena-fuzz-controller-request`
// writes one well-formed request of each kind into DIR and exits
// (corpus/controller_request/ was made that way, then grown by fuzzing).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <spdlog/spdlog.h>
#include <string>
#include <thrift/TApplicationException.h>
#include <thrift/TOutput.h>
#include <thrift/TProcessor.h>
#include <thrift/transport/TBufferTransports.h>
#include <vector>

#include <catena/control/controller.hpp>
#include <catena/control/controller_server.hpp>
#include <catena/control/idl/Controller.h>
#include <catena/control/inproc_broker_admin.hpp>
#include <catena/fabric/clock.hpp>

#include "checked_protocol.hpp"
#include "fuzz_check.hpp"
#include "thrift_socket.hpp"

namespace {

using apache::thrift::TApplicationException;
using apache::thrift::protocol::TMessageType;
using apache::thrift::transport::TMemoryBuffer;
namespace control = catena::control;
namespace idl = catena::control::idl;

constexpr const char* kAdminToken = "fuzz-admin-token";
constexpr int kNodes = 4;

// A broker that takes every assignment, fence, seal and marker.
class AcceptingBroker final : public idl::BrokerAdminIf {
 public:
  void authenticate(const std::string&, std::int64_t) override {}
  void configureChain(const idl::ChainAssignment&) override {}
  void fence(const std::string&, std::int32_t, std::int64_t) override {}
  void ping(idl::NodeStats&) override {}
  void seal(idl::SealReply& out, const std::string&, std::int32_t, std::int64_t) override {
    out.__set_end_offset(0);
    out.__set_commit_offset(0);
  }
  void appendMarker(idl::MarkerReply&, const std::string&, std::int32_t, std::int64_t, std::int32_t,
                    std::int32_t, std::int32_t) override {}
};

std::shared_ptr<control::detail::CheckedBinaryProtocol> wire_protocol(
    const std::shared_ptr<TMemoryBuffer>& buffer) {
  return std::make_shared<control::detail::CheckedBinaryProtocol>(
      buffer, control::detail::kMaxStringBytes, control::detail::kMaxContainerItems,
      /*strict_read=*/true, /*strict_write=*/true);
}

class World {
 public:
  World() {
    char tmpl[] = "/tmp/catena-fuzz-controller-XXXXXX";
    const char* d = mkdtemp(tmpl);
    FUZZ_CHECK(d != nullptr);
    dir_ = d;
    for (int i = 0; i < kNodes; ++i) {
      admin_.attach("node" + std::to_string(i) + ".fuzz:7000", std::make_shared<AcceptingBroker>());
    }
    control::Controller::Options o;
    o.data_dir = dir_ / "meta";
    o.marker_commit_timeout = std::chrono::milliseconds(20);
    o.link_fault_timeout = std::chrono::milliseconds(20);
    o.broker_rpc_threads = 1;
    auto c = control::Controller::open(o, clock_, admin_);
    if (!c) {
      std::fprintf(stderr, "controller: %s\n", c.error().describe().c_str());
      std::abort();
    }
    controller_ = std::shared_ptr<control::Controller>(std::move(*c));
    for (int i = 0; i < kNodes; ++i) {
      idl::NodeInfo info;
      info.__set_admin_addr("node" + std::to_string(i) + ".fuzz:7000");
      info.__set_fabric_addr("node" + std::to_string(i) + ".fuzz:9000");
      info.__set_zone("z" + std::to_string(i % 3));
      FUZZ_CHECK(controller_->register_node(info).ok());
    }
    idl::ChannelConfig ch;
    ch.__set_name("orders");
    ch.__set_partitions(4);
    ch.__set_replication(3);
    ch.__set_segment_bytes(1 << 20);
    ch.__set_ttl_ms(60000);
    FUZZ_CHECK(controller_->create_channel(ch).ok());
    role_ = std::make_shared<control::ControllerRole>();
    role_->lead(controller_);
  }
  ~World() {
    role_.reset();
    controller_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // A new connection's: what one input authenticated as does not carry over.
  std::shared_ptr<apache::thrift::TProcessor> connection(bool closed) {
    return control::make_connection_processor(role_, closed ? kAdminToken : "");
  }

 private:
  std::filesystem::path dir_;
  catena::ManualClock clock_;
  control::InProcBrokerAdmin admin_;
  std::shared_ptr<control::Controller> controller_;
  std::shared_ptr<control::ControllerRole> role_;
};

// Checks the reply the processor wrote: it decodes, and it is not a
// handler's stray exception.
void check_reply(TMemoryBuffer& out_buffer) {
  std::uint8_t* at = nullptr;
  std::uint32_t size = 0;
  out_buffer.getBuffer(&at, &size);
  if (size == 0) return;  // nothing decoded far enough to answer
  auto in = std::make_shared<TMemoryBuffer>(at, size, TMemoryBuffer::COPY, control::detail::wire_config());
  auto proto = wire_protocol(in);
  std::string name;
  TMessageType type = apache::thrift::protocol::T_CALL;
  std::int32_t seq = 0;
  try {
    proto->readMessageBegin(name, type, seq);
    if (type == apache::thrift::protocol::T_EXCEPTION) {
      TApplicationException x;
      x.read(proto.get());
      if (x.getType() != TApplicationException::UNKNOWN_METHOD) {
        std::fprintf(stderr, "%s answered with a TApplicationException (type %d): %s\n", name.c_str(),
                     static_cast<int>(x.getType()), x.what());
        std::abort();
      }
      return;
    }
    FUZZ_CHECK(type == apache::thrift::protocol::T_REPLY);
    proto->skip(apache::thrift::protocol::T_STRUCT);
    proto->readMessageEnd();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "a reply that does not decode: %s\n", e.what());
    std::abort();
  }
}

std::unique_ptr<World>& world() {
  static std::unique_ptr<World> w;
  return w;
}

// One well-formed request of each kind (an admin's), with its selector
// byte, into `dir`.
void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  int n = 0;
  auto emit = [&](bool closed, const std::function<void(idl::ControllerClient&)>& call) {
    auto buffer = std::make_shared<TMemoryBuffer>(control::detail::wire_config());
    auto proto = wire_protocol(buffer);
    idl::ControllerClient client(proto);
    call(client);
    std::ofstream f(dir / ("seed-" + std::to_string(n++)), std::ios::binary);
    const char selector = closed ? 1 : 0;
    f.write(&selector, 1);
    const std::string bytes = buffer->getBufferAsString();
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  idl::NodeInfo info;
  info.__set_admin_addr("node9.fuzz:7000");
  info.__set_fabric_addr("node9.fuzz:9000");
  info.__set_zone("z1");
  idl::PartitionProgress held;
  held.__set_channel("orders");
  held.__set_partition(1);
  emit(false, [&](auto& c) { c.send_registerNode(info, {held}); });
  idl::HeartbeatRequest hb;
  hb.__set_node_id("node-1");
  hb.__set_node_epoch(1);
  emit(false, [&](auto& c) { c.send_heartbeat(hb); });
  idl::ChannelConfig ch;
  ch.__set_name("acme.trades");
  ch.__set_partitions(3);
  ch.__set_replication(2);
  ch.__set_segment_bytes(1 << 20);
  ch.__set_ttl_ms(5000);
  emit(false, [&](auto& c) { c.send_createChannel(ch); });
  emit(false, [&](auto& c) { c.send_listChannels(); });
  emit(false, [&](auto& c) { c.send_describeChannel("orders"); });
  emit(false, [&](auto& c) { c.send_getRoute("orders", 2, 0); });
  idl::FailureReport fr;
  fr.__set_reporter("node-2");
  fr.__set_suspect_node_id("node-1");
  fr.__set_channel("orders");
  fr.__set_partition(0);
  fr.__set_epoch(1);
  fr.__set_reason("connection reset");
  emit(false, [&](auto& c) { c.send_reportFailure(fr); });
  emit(false, [&](auto& c) { c.send_declarePartitionLost("orders", 3); });
  emit(false, [&](auto& c) { c.send_movePartition("orders", 1, {"node-4", "node-1"}); });
  emit(false, [&](auto& c) { c.send_clusterStatus(); });
  emit(false, [&](auto& c) { c.send_drainNode("node-2"); });
  emit(false, [&](auto& c) { c.send_rebalance(true); });
  emit(false, [&](auto& c) { c.send_addNode("node-4", false); });
  emit(false, [&](auto& c) { c.send_commitOffset("billing", "orders", 0, 17); });
  emit(false, [&](auto& c) { c.send_initProducer(0); });
  emit(false, [&](auto& c) { c.send_alterChannel("orders", 6); });
  emit(false, [&](auto& c) { c.send_alterRetention("orders", 120000); });
  emit(false, [&](auto& c) { c.send_deleteChannel("orders"); });
  emit(false, [&](auto& c) { c.send_joinGroup("billing", "orders", "worker-1", {0, 1}); });
  emit(false, [&](auto& c) { c.send_groupHeartbeat("billing", "member-1", {1}); });
  emit(false, [&](auto& c) { c.send_leaveGroup("billing", "member-1"); });
  std::vector<idl::PartitionOffset> offsets(2);
  offsets[0].__set_partition(0);
  offsets[0].__set_offset(5);
  offsets[1].__set_partition(1);
  offsets[1].__set_offset(9);
  emit(false, [&](auto& c) { c.send_commitOffsets("billing", "orders", "member-1", 1, offsets); });
  emit(false, [&](auto& c) { c.send_listGroups(); });
  emit(false, [&](auto& c) { c.send_describeGroup("billing"); });
  idl::TenantQuotas q;
  q.__set_max_channels(4);
  q.__set_max_partitions(16);
  q.__set_zones({"z0", "z1"});
  emit(false, [&](auto& c) { c.send_createTenant("acme", q); });
  emit(false, [&](auto& c) { c.send_listTenants(); });
  emit(false, [&](auto& c) { c.send_alterTenant("acme", q); });
  emit(false, [&](auto& c) { c.send_rotateTenantToken("acme"); });
  emit(false, [&](auto& c) { c.send_deleteTenant("acme"); });
  emit(true, [&](auto& c) { c.send_authenticate(kAdminToken); });
  emit(true, [&](auto& c) { c.send_authenticate("wrong"); });
  emit(true, [&](auto& c) { c.send_createChannel(ch); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("CATENA_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  // The controller's log lines and Thrift's "invalid message type" notes
  // for each input would drown libFuzzer's own output.
  spdlog::set_level(spdlog::level::off);
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint64_t runs = 0;
  if (size < 1) return 0;
  if (!world() || ++runs % 256 == 0) {
    world().reset();
    world() = std::make_unique<World>();
  }
  const bool closed = (data[0] & 1) != 0;
  // One frame, as ThriftServer's connection reads it (at most kMaxFrameBytes).
  if (size - 1 > static_cast<std::size_t>(control::detail::kMaxFrameBytes)) return 0;
  auto in = std::make_shared<TMemoryBuffer>(const_cast<std::uint8_t*>(data + 1),
                                            static_cast<std::uint32_t>(size - 1), TMemoryBuffer::OBSERVE,
                                            control::detail::wire_config());
  auto out = std::make_shared<TMemoryBuffer>(control::detail::wire_config());
  auto in_proto = wire_protocol(in);
  auto out_proto = wire_protocol(out);
  try {
    (void)world()->connection(closed)->process(in_proto, out_proto, nullptr);
  } catch (const std::exception&) {
    // A request that does not decode: the server closes the connection.
    return 0;
  }
  check_reply(*out);
  return 0;
}
