// `catena bench --move`: what one tail-offset handoff sends, in bytes.
//
// A move copies no record, so what it costs in bytes is what the control
// plane says to get the new chain going. Counted here from the real
// contents, encoded as the wire encodes them (TBinaryProtocol, each call in
// its message envelope and 4-byte frame):
//   seal         one BrokerAdmin.seal call to the old head and its reply,
//                which carries the producer snapshot (the controller repeats
//                the call every millisecond until the chain committed all the
//                head stored; a repeat is the same size and is not counted);
//   metadata     the move's records in the controller's write-ahead log, as
//                written (the intent, and the record that commits the new
//                route, naming only what changed, with the handoff's
//                producer state);
//   assignments  one configureChain call and reply to every node the new
//                route names: the new chain (its head with the producer
//                state) and the nodes of the sealed ranges, told to keep them
//                read-only (the range this move sealed; older ranges' nodes
//                were told before); each is sent the route with only the
//                sealed ranges it holds, as the controller sends it.
// The producer state is read back from the commit record in the log and
// the route is the one the move call returned, so nothing is estimated. Not counted: each client's getRoute
// that follows the move (route_bytes each), heartbeats, and the RPC that
// asks for the move.
#include <algorithm>
#include <memory>
#include <string>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/idl/catena_meta_types.h>
#include <catena/control/wal.hpp>

#include "bench_parts.hpp"

namespace catena::cli::bench_detail {

namespace idl = control::idl;
namespace meta = control::meta;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::protocol::TMessageType;
using apache::thrift::transport::TMemoryBuffer;

namespace {

constexpr std::int64_t kFrameHeader = 4;  // TFramedTransport's length word

// One RPC message as the wire carries it: frame, envelope, arguments.
template <class Args>
std::int64_t message_bytes(const std::string& name, TMessageType type, const Args& args) {
  auto buf = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol proto(buf);
  proto.writeMessageBegin(name, type, 0);
  args.write(&proto);
  proto.writeMessageEnd();
  return kFrameHeader + static_cast<std::int64_t>(buf->available_read());
}

template <class T>
std::int64_t struct_bytes(const T& value) {
  auto buf = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol proto(buf);
  value.write(&proto);
  return static_cast<std::int64_t>(buf->available_read());
}

bool decode(std::string payload, meta::MetaRecord* out) {
  try {
    auto buf = std::make_shared<TMemoryBuffer>(reinterpret_cast<std::uint8_t*>(payload.data()),
                                               static_cast<std::uint32_t>(payload.size()));
    TBinaryProtocol proto(buf);
    out->read(&proto);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

MoveBytes MoveLog::next_move(const idl::PartitionRoute& moved, std::int64_t segment_bytes,
                             std::int64_t ttl_ms, std::int32_t partitions) {
  MoveBytes out;
  const std::string& channel = moved.channel;
  const std::int32_t partition = moved.partition;
  auto wal = control::read_wal(path_);
  if (!wal) return out;
  meta::MetaRecord commit;
  bool committed = false;
  for (const auto& rec : wal->records) {
    if (rec.lsn <= last_lsn_) continue;
    last_lsn_ = rec.lsn;
    meta::MetaRecord r;
    if (!decode(rec.payload, &r)) continue;
    if (r.__isset.begin_move && r.begin_move.channel == channel && r.begin_move.partition == partition) {
      out.metadata += static_cast<std::int64_t>(rec.payload.size());
    }
    if (r.__isset.move_route && r.move_route.channel == channel && r.move_route.partition == partition &&
        r.move_route.epoch == moved.epoch && r.__isset.set_handoff) {
      out.metadata += static_cast<std::int64_t>(rec.payload.size());
      commit = std::move(r);
      committed = true;
    }
  }
  if (!committed) return out;  // not in the log (a snapshot emptied it): not found
  // The record names only what changed; the route it left is what the
  // move call returned.
  const idl::PartitionRoute* route = &moved;
  out.found = true;
  out.producers = commit.set_handoff.producers.size();
  out.route = struct_bytes(*route);

  idl::BrokerAdmin_seal_args seal;
  seal.channel = channel;
  seal.partition = partition;
  seal.epoch = moved.epoch - 1;
  idl::BrokerAdmin_seal_result sealed;
  sealed.success.__set_end_offset(route->start_offset);
  sealed.success.__set_commit_offset(route->start_offset);
  sealed.success.__set_producers(commit.set_handoff.producers);
  sealed.__isset.success = true;
  out.seal = message_bytes("seal", apache::thrift::protocol::T_CALL, seal) +
             message_bytes("seal", apache::thrift::protocol::T_REPLY, sealed);

  // Who is pushed the route: its chain, then the nodes of the range this move
  // sealed (the last). Nodes of older ranges confirmed a route in which
  // their ranges were sealed already and are not told again (the controller
  // tells them again only after it restarted).
  std::vector<std::string> targets;
  auto add = [&](const idl::Replica& r) {
    if (std::find(targets.begin(), targets.end(), r.node_id) == targets.end()) targets.push_back(r.node_id);
  };
  for (const auto& r : route->replicas) add(r);
  for (const auto& r : route->joining) add(r);
  if (!route->sealed.empty()) {
    for (const auto& r : route->sealed.back().replicas) add(r);
  }
  const idl::BrokerAdmin_configureChain_result done;
  for (const auto& node : targets) {
    idl::BrokerAdmin_configureChain_args a;
    // As the controller pushes it: only the sealed ranges this node holds.
    idl::PartitionRoute pushed = *route;
    std::erase_if(pushed.sealed, [&](const idl::SealedRange& range) {
      return std::none_of(range.replicas.begin(), range.replicas.end(),
                          [&](const idl::Replica& r) { return r.node_id == node; });
    });
    a.assignment.__set_route(pushed);
    a.assignment.__set_segment_bytes(segment_bytes);
    a.assignment.__set_ttl_ms(ttl_ms);
    a.assignment.__set_channel_partitions(partitions);
    a.assignment.__set_link_secret(std::string(16, '\0'));
    if (!route->replicas.empty() && route->replicas.front().node_id == node) {
      a.assignment.__set_producers(commit.set_handoff.producers);
    }
    out.assignments += message_bytes("configureChain", apache::thrift::protocol::T_CALL, a) +
                       message_bytes("configureChain", apache::thrift::protocol::T_REPLY, done);
  }
  out.pushes = targets.size();
  return out;
}

}  // namespace catena::cli::bench_detail
