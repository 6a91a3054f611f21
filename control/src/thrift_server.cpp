#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>
#include <thrift/TOutput.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <unordered_map>
#include <vector>

#include <catena/control/address.hpp>
#include <catena/control/thrift_server.hpp>
#include <catena/fabric/thread_annotations.hpp>

#include "checked_protocol.hpp"
#include "thrift_socket.hpp"

namespace catena::control {
namespace {

namespace asio = boost::asio;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::protocol::TProtocol;
using apache::thrift::transport::TMemoryBuffer;
using apache::thrift::transport::TTransport;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

// The method a reply answers and whether it is an error: a
// TApplicationException, or a result struct whose first field is not the
// success field 0 (a declared exception). False for a reply that does not
// decode, which the server never writes.
bool decode_reply(std::uint8_t* reply, std::uint32_t size, std::string& method, bool& failed) {
  try {
    auto buffer = std::make_shared<TMemoryBuffer>(reply, size, TMemoryBuffer::OBSERVE);
    TBinaryProtocol protocol(buffer);
    apache::thrift::protocol::TMessageType type{};
    std::int32_t seqid = 0;
    protocol.readMessageBegin(method, type, seqid);
    if (type == apache::thrift::protocol::T_EXCEPTION) {
      failed = true;
      return true;
    }
    std::string name;
    protocol.readStructBegin(name);
    apache::thrift::protocol::TType field_type{};
    std::int16_t field_id = 0;
    protocol.readFieldBegin(name, field_type, field_id);
    failed = field_type != apache::thrift::protocol::T_STOP && field_id != 0;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// A connection's buffers grow to its largest frame; past this they are
// given back once the frame is served.
constexpr std::uint32_t kKeptBufferBytes = 1U << 20;

// What a processor factory gets as TConnectionInfo::transport: the peer, as
// numbers (no name lookup), and nothing to read or write.
class PeerTransport final : public TTransport {
 public:
  explicit PeerTransport(std::string origin) : origin_(std::move(origin)) {}
  // NOLINTNEXTLINE(readability-const-return-type): Thrift's signature
  [[nodiscard]] const std::string getOrigin() const override { return origin_; }

 private:
  std::string origin_;
};

std::string numeric_peer(const tcp::socket& socket) {
  error_code ec;
  const auto ep = socket.remote_endpoint(ec);
  if (ec) return "?";
  return HostPort{ep.address().to_string(), ep.port()}.to_string();
}

void thrift_output(const char* message) {
  spdlog::debug("thrift: {}", message);
}

}  // namespace

void route_thrift_logs_to_spdlog() {
  apache::thrift::GlobalOutput.setOutputFunction(&thrift_output);
}

// The server's shared state. Members above `io` outlive it: a connection
// still queued in the io_context when it is destroyed reaches them from its
// destructor.
struct ThriftServer::Impl {
  class Connection;

  Impl(std::shared_ptr<apache::thrift::TProcessorFactory> f, Options o)
      : factory(std::move(f)), options(std::move(o)) {}

  void run();
  // On accept_strand: accepts one client (unless stopping).
  void accept();
  void on_accept(const error_code& ec);
  // From a connection's destructor, on whichever thread dropped it last.
  void connection_closed(std::uint64_t id);

  const std::shared_ptr<apache::thrift::TProcessorFactory> factory;
  const Options options;

  Mutex mu;
  bool started GUARDED_BY(mu) = false;
  bool stopping GUARDED_BY(mu) = false;
  bool accept_paused GUARDED_BY(mu) = false;  // at max_connections
  std::int64_t active GUARDED_BY(mu) = 0;
  std::uint64_t next_id GUARDED_BY(mu) = 0;
  std::unordered_map<std::uint64_t, std::weak_ptr<Connection>> live GUARDED_BY(mu);

  asio::io_context io;
  // The acceptor, the socket being accepted and the retry timer are used on
  // this strand only (and by start() before the threads exist).
  asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(io)};
  tcp::acceptor acceptor{accept_strand};
  std::optional<tcp::socket> pending;
  asio::steady_timer accept_retry{accept_strand};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;  // start() and stop() only
};

// One client. Everything here runs on the connection's own strand (the
// socket's executor), one handler at a time: read the length, read the
// frame, process it, write the reply, read the next length. Each pending
// operation holds a shared_ptr to it; the last one to finish frees it.
class ThriftServer::Impl::Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl& server, std::uint64_t id, tcp::socket socket)
      : server_(server),
        id_(id),
        executor_(socket.get_executor()),
        socket_(std::move(socket)),
        idle_(executor_) {}
  ~Connection() { server_.connection_closed(id_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Its strand: stop() posts close() there.
  [[nodiscard]] const asio::any_io_executor& executor() const { return executor_; }

  void start() {
    if (closed_) return;  // stop() came first
    error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    peer_ = numeric_peer(socket_);
    in_ = std::make_shared<TMemoryBuffer>(detail::wire_config());
    out_ = std::make_shared<TMemoryBuffer>(detail::wire_config());
    in_protocol_ = std::make_shared<detail::CheckedBinaryProtocol>(
        in_, detail::kMaxStringBytes, detail::kMaxContainerItems,
        /*strict_read=*/true, /*strict_write=*/true);
    out_protocol_ = std::make_shared<detail::CheckedBinaryProtocol>(
        out_, detail::kMaxStringBytes, detail::kMaxContainerItems,
        /*strict_read=*/true, /*strict_write=*/true);
    try {
      processor_ = server_.factory->getProcessor(apache::thrift::TConnectionInfo{
          in_protocol_, out_protocol_, std::make_shared<PeerTransport>(peer_)});
    } catch (const std::exception& e) {
      spdlog::warn("thrift server: no processor for {}: {}", peer_, e.what());
    }
    if (!processor_) {
      close();
      return;
    }
    read_length();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);  // pending reads and writes end with operation_aborted
    idle_.cancel();
  }

 private:
  // Waiting on the client (for a request, or for it to take a reply): it
  // gets idle_timeout. Every wait re-arms the timer, so the time a handler
  // takes never counts.
  void arm_idle() {
    idle_.expires_after(server_.options.idle_timeout);
    idle_.async_wait([self = shared_from_this()](const error_code& ec) {
      // A wait that completed just before the timer was re-armed finds a
      // later expiry: not idle.
      if (ec || self->closed_ || self->idle_.expiry() > asio::steady_timer::clock_type::now()) return;
      spdlog::debug("thrift server: {} idle for {} ms, closed", self->peer_,
                    self->server_.options.idle_timeout.count());
      self->close();
    });
  }

  void read_length() {
    if (closed_) return;
    arm_idle();
    asio::async_read(socket_, asio::buffer(length_),
                     [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_length(ec); });
  }

  void on_length(const error_code& ec) {
    if (ec) {
      ended(ec, "reading a frame length");
      return;
    }
    const auto length =
        static_cast<std::int32_t>((std::uint32_t{length_[0]} << 24U) | (std::uint32_t{length_[1]} << 16U) |
                                  (std::uint32_t{length_[2]} << 8U) | std::uint32_t{length_[3]});
    if (length <= 0 || length > detail::kMaxFrameBytes) {
      spdlog::debug("thrift server: {} sent a frame length of {}, closed", peer_, length);
      close();
      return;
    }
    std::uint8_t* at = nullptr;
    try {
      in_->resetBuffer();
      at = in_->getWritePtr(static_cast<std::uint32_t>(length));
    } catch (const std::exception& e) {
      spdlog::warn("thrift server: {}: no room for a frame of {} bytes: {}", peer_, length, e.what());
      close();
      return;
    }
    asio::async_read(
        socket_, asio::buffer(at, static_cast<std::size_t>(length)),
        [self = shared_from_this()](const error_code& e, std::size_t n) { self->on_frame(e, n); });
  }

  void on_frame(const error_code& ec, std::size_t n) {
    if (ec) {
      ended(ec, "reading a frame");
      return;
    }
    if (closed_) return;
    in_->wroteBytes(static_cast<std::uint32_t>(n));
    out_->resetBuffer();
    bool keep = false;
    try {
      keep = processor_->process(in_protocol_, out_protocol_, nullptr);
    } catch (const std::exception& e) {
      // Garbage in a well-framed request (bad version, a string over the
      // limit, a truncated struct): TProtocolException or TTransportException.
      spdlog::debug("thrift server: {} sent a request that does not parse, closed: {}", peer_, e.what());
    } catch (...) {
      spdlog::debug("thrift server: {}: the processor threw, closed", peer_);
    }
    if (in_->getBufferSize() > kKeptBufferBytes) in_->resetBuffer(TMemoryBuffer::defaultSize);
    if (!keep) {
      close();
      return;
    }
    std::uint8_t* reply = nullptr;
    std::uint32_t size = 0;
    out_->getBuffer(&reply, &size);
    if (size == 0) {  // a oneway call
      read_length();
      return;
    }
    if (server_.options.on_reply) {
      std::string method;
      bool failed = false;
      if (decode_reply(reply, size, method, failed)) server_.options.on_reply(method, failed);
    }
    reply_length_ = {static_cast<std::uint8_t>(size >> 24U), static_cast<std::uint8_t>(size >> 16U),
                     static_cast<std::uint8_t>(size >> 8U), static_cast<std::uint8_t>(size)};
    arm_idle();
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(reply_length_), asio::buffer(reply, size)};
    asio::async_write(socket_, buffers,
                      [self = shared_from_this()](const error_code& e, std::size_t) { self->on_written(e); });
  }

  void on_written(const error_code& ec) {
    if (ec) {
      ended(ec, "writing a reply");
      return;
    }
    if (out_->getBufferSize() > kKeptBufferBytes) out_->resetBuffer(TMemoryBuffer::defaultSize);
    read_length();
  }

  // An operation failed: the client hung up (quietly), was closed by us
  // (idle, stop(): quietly), or something else went wrong (logged).
  void ended(const error_code& ec, const char* doing) {
    if (!closed_ && ec != asio::error::eof && ec != asio::error::operation_aborted &&
        ec != asio::error::connection_reset) {
      spdlog::debug("thrift server: {} dropped while {}: {}", peer_, doing, ec.message());
    }
    close();
  }

  Impl& server_;
  const std::uint64_t id_;
  const asio::any_io_executor executor_;
  tcp::socket socket_;
  asio::steady_timer idle_;
  std::string peer_;
  bool closed_ = false;
  std::array<std::uint8_t, 4> length_{};
  std::array<std::uint8_t, 4> reply_length_{};
  std::shared_ptr<TMemoryBuffer> in_;
  std::shared_ptr<TMemoryBuffer> out_;
  std::shared_ptr<TProtocol> in_protocol_;
  std::shared_ptr<TProtocol> out_protocol_;
  // Declared last, so released first: its handler may still hold the
  // protocols it was given.
  std::shared_ptr<apache::thrift::TProcessor> processor_;
};

void ThriftServer::Impl::run() {
  for (;;) {
    try {
      io.run();  // returns once stop() took the work away and everything ended
      return;
    } catch (const std::exception& e) {
      spdlog::error("thrift server: a handler threw: {}", e.what());
    }
  }
}

void ThriftServer::Impl::accept() {
  {
    MutexLock lock(mu);
    if (stopping) return;
  }
  // The client's socket lives on a strand of its own.
  pending.emplace(asio::make_strand(io));
  acceptor.async_accept(*pending, [this](const error_code& ec) { on_accept(ec); });
}

void ThriftServer::Impl::on_accept(const error_code& ec) {
  tcp::socket socket = std::move(*pending);
  pending.reset();
  if (ec) {
    if (ec == asio::error::operation_aborted) return;  // stop()
    {
      MutexLock lock(mu);
      if (stopping) return;
    }
    // Out of descriptors, a client that reset before accept: keep serving.
    spdlog::debug("thrift server: accept failed: {}", ec.message());
    accept_retry.expires_after(10ms);
    accept_retry.async_wait([this](const error_code& e) {
      if (!e) accept();
    });
    return;
  }
  std::shared_ptr<Connection> connection;
  bool more = false;
  {
    MutexLock lock(mu);
    if (stopping) {
      error_code ignored;
      socket.close(ignored);
      return;
    }
    const std::uint64_t id = next_id++;
    connection = std::make_shared<Connection>(*this, id, std::move(socket));
    live.emplace(id, connection);
    ++active;
    more = active < options.max_connections;
    accept_paused = !more;
  }
  asio::post(connection->executor(), [connection] { connection->start(); });
  // At the limit, further clients wait in the listen backlog until
  // connection_closed() resumes.
  if (more) accept();
}

void ThriftServer::Impl::connection_closed(std::uint64_t id) {
  bool resume = false;
  {
    MutexLock lock(mu);
    live.erase(id);
    --active;
    if (accept_paused && !stopping && active < options.max_connections) {
      accept_paused = false;
      resume = true;
    }
  }
  if (resume) asio::post(accept_strand, [this] { accept(); });
}

ThriftServer::ThriftServer(std::shared_ptr<apache::thrift::TProcessor> processor, Options options)
    : ThriftServer(std::make_shared<apache::thrift::TSingletonProcessorFactory>(std::move(processor)),
                   std::move(options)) {}

ThriftServer::ThriftServer(std::shared_ptr<apache::thrift::TProcessorFactory> factory, Options options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(std::move(factory), options_)) {}

ThriftServer::~ThriftServer() {
  stop();
}

std::string ThriftServer::address() const {
  return HostPort{options_.host, bound_port_}.to_string();
}

Result<void> ThriftServer::start() {
  if (options_.threads < 1 || options_.threads > 1024) {
    return invalid_argument(
        fmt::format("thrift server: threads must be in 1..1024, got {}", options_.threads));
  }
  if (options_.max_connections < 1) {
    return invalid_argument(
        fmt::format("thrift server: max_connections must be at least 1, got {}", options_.max_connections));
  }
  if (options_.idle_timeout <= 0ms) {
    return invalid_argument(fmt::format("thrift server: idle_timeout must be positive, got {} ms",
                                        options_.idle_timeout.count()));
  }
  Impl& s = *impl_;
  {
    MutexLock lock(s.mu);
    if (s.started || s.stopping) return make_error(idl::ErrorCode::INTERNAL, "a ThriftServer starts once");
    s.started = true;
  }
  const auto where = fmt::format("{}:{}", options_.host, options_.port);
  error_code ec;
  tcp::resolver resolver(s.io);
  const auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec)
    return make_error(idl::ErrorCode::UNAVAILABLE,
                      fmt::format("cannot listen on {}: {}", where, ec.message()));
  std::string why = "no address";
  for (const auto& entry : endpoints) {
    error_code e;
    s.acceptor.open(entry.endpoint().protocol(), e);
    if (!e) s.acceptor.set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) s.acceptor.bind(entry.endpoint(), e);
    if (!e) s.acceptor.listen(asio::socket_base::max_listen_connections, e);
    if (!e) break;
    why = e.message();
    error_code ignored;
    s.acceptor.close(ignored);
  }
  if (!s.acceptor.is_open()) {
    return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("cannot listen on {}: {}", where, why));
  }
  const auto local = s.acceptor.local_endpoint(ec);
  if (ec) return make_error(idl::ErrorCode::INTERNAL, "no local address on the listening socket");
  bound_port_ = local.port();
  s.work.emplace(asio::make_work_guard(s.io));
  asio::post(s.accept_strand, [&s] { s.accept(); });
  s.threads.reserve(static_cast<std::size_t>(options_.threads));
  for (int i = 0; i < options_.threads; ++i) s.threads.emplace_back([&s] { s.run(); });
  return {};
}

void ThriftServer::stop() {
  Impl& s = *impl_;
  std::vector<std::shared_ptr<Impl::Connection>> open;
  {
    MutexLock lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    for (const auto& [id, weak] : s.live) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  asio::post(s.accept_strand, [&s] {
    error_code ignored;
    s.acceptor.close(ignored);
    s.accept_retry.cancel();
  });
  // A connection inside a call closes once the call returned (its strand
  // runs one handler at a time); its reply may or may not have gone out.
  for (auto& c : open) asio::post(c->executor(), [c] { c->close(); });
  open.clear();
  s.work.reset();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

std::unique_ptr<ThriftServer> make_broker_admin_server(std::shared_ptr<idl::BrokerAdminIf> handler,
                                                       ThriftServer::Options options) {
  return std::make_unique<ThriftServer>(std::make_shared<idl::BrokerAdminProcessor>(std::move(handler)),
                                        std::move(options));
}

std::unique_ptr<ThriftServer> make_broker_admin_server(std::shared_ptr<idl::BrokerAdminIfFactory> handlers,
                                                       ThriftServer::Options options) {
  return std::make_unique<ThriftServer>(
      std::make_shared<idl::BrokerAdminProcessorFactory>(std::move(handlers)), std::move(options));
}

}  // namespace catena::control
