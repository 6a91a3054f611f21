// The C API (<catena/catena.h>) over the C++ client: opaque handles that own
// the C++ objects, error codes and a per-thread message instead of
// exceptions. Every entry point catches everything: nothing C++ crosses the
// C boundary.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <catena/broker/client_error.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/record_views.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/catena.h>
#include <catena/client/connect.hpp>

namespace client = catena::client;

struct catena_routes {
  std::shared_ptr<catena::RouteSource> routes;
};
struct catena_publisher {
  std::shared_ptr<catena::RouteSource> routes;  // outlives the publisher
  std::unique_ptr<catena::Publisher> pub;
  // Open claims by partition, with the id handed out (catena_claim.id);
  // destroyed (aborted) before the publisher. Grows at a claim on a
  // partition not seen yet: per partition, never per claim.
  struct OpenClaim {
    catena::Claim claim;
    std::uint64_t id = 0;
  };
  std::vector<OpenClaim> claims;
  std::uint64_t next_claim = 1;
};
struct catena_subscriber {
  std::shared_ptr<catena::RouteSource> routes;
  std::unique_ptr<catena::Subscriber> sub;
};

namespace {

// The same values on both sides: catena_err is the C spelling of ErrorCode.
static_assert(static_cast<int>(client::ErrorCode::invalid_argument) == CATENA_ERR_INVALID_ARGUMENT);
static_assert(static_cast<int>(client::ErrorCode::internal) == CATENA_ERR_INTERNAL);
static_assert(static_cast<int>(client::ErrorCode::backpressure) == CATENA_ERR_BACKPRESSURE);
static_assert(static_cast<int>(client::ErrorCode::controller_unavailable) ==
              CATENA_ERR_CONTROLLER_UNAVAILABLE);
static_assert(static_cast<int>(client::ErrorCode::corrupt) == CATENA_ERR_CORRUPT);
constexpr int kLastCode = CATENA_ERR_CORRUPT;

thread_local std::string last_error;

catena_err to_c(client::ErrorCode code) {
  return static_cast<catena_err>(code);
}

catena_err fail(catena_err code, std::string message) {
  last_error = std::move(message);
  return code;
}
catena_err fail(const client::Error& e) {
  return fail(to_c(e.code), e.describe());
}

// What a C++ exception escaping the client becomes.
catena_err caught() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(CATENA_ERR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return fail(CATENA_ERR_INTERNAL, std::string("internal: ") + e.what());
  } catch (...) {
    return fail(CATENA_ERR_INTERNAL, "internal: unknown exception");
  }
}

std::span<const std::byte> bytes(const void* p, std::size_t n) {
  return {static_cast<const std::byte*>(p), n};
}

// The C callback as the publisher's: none when cb is NULL.
// The options structs as the header first had them (through linger_us, and
// through ring_bytes): a program built then passes that size.
constexpr std::size_t kPublisherOptionsFirst = offsetof(catena_publisher_options, max_batch_bytes);
constexpr std::size_t kSubscriberOptionsFirst = offsetof(catena_subscriber_options, on_event);
static_assert(kPublisherOptionsFirst == 40 && kSubscriberOptionsFirst == 56,
              "fields added to an options struct go after the ones a program built earlier knows");

static_assert(static_cast<int>(catena::ClientEvent::Kind::route_changed) == CATENA_EVENT_ROUTE_CHANGED &&
              static_cast<int>(catena::ClientEvent::Kind::ack_stalled) == CATENA_EVENT_ACK_STALLED &&
              static_cast<int>(catena::ClientEvent::Kind::partition_unavailable) ==
                  CATENA_EVENT_PARTITION_UNAVAILABLE &&
              static_cast<int>(catena::ClientEvent::Kind::log_full) == CATENA_EVENT_LOG_FULL &&
              static_cast<int>(catena::ClientEvent::Kind::rate_limited) == CATENA_EVENT_RATE_LIMITED);

catena::ClientEventHandler event_handler(catena_event_cb cb, void* opaque) {
  if (cb == nullptr) return {};
  return [cb, opaque](const catena::ClientEvent& e) {
    const catena_event c{static_cast<catena_event_kind>(e.kind), e.partition,
                         catena::to_string(e.kind).data(),  // a literal: NUL-terminated
                         e.message.c_str()};
    cb(opaque, &c);
  };
}

catena::PublishCallback ack_callback(catena_publish_cb cb, void* opaque) {
  if (cb == nullptr) return {};
  return [cb, opaque](const catena::PublishResult& r) {
    const catena_publish_result c{to_c(r.error()), r.partition, r.offset, r.sequence};
    cb(opaque, &c);
  };
}

}  // namespace

extern "C" {

const char* catena_strerror(int err) noexcept {
  if (err < CATENA_OK || err > kLastCode) return "unknown";
  // to_string's views are of string literals: NUL-terminated.
  return client::to_string(static_cast<client::ErrorCode>(err)).data();
}

int catena_err_retriable(int err) noexcept {
  if (err <= CATENA_OK || err > kLastCode) return 0;
  return client::retriable(static_cast<client::ErrorCode>(err)) ? 1 : 0;
}

const char* catena_last_error(void) noexcept {
  return last_error.c_str();
}

catena_err catena_connect(const char* controllers, const char* token, catena_routes** out) noexcept {
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_connect: out is NULL");
  *out = nullptr;
  if (controllers == nullptr || *controllers == '\0')
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_connect: no controller address");
  try {
    catena::ConnectOptions options;
    if (token != nullptr) options.token = token;
    options.client_name = "c-client";
    auto connected = catena::connect(controllers, options);  // invalid_argument: a malformed list
    if (!connected) return fail(connected.error());
    auto r = std::make_unique<catena_routes>();
    r->routes = std::move(connected.value());
    *out = r.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

void catena_routes_destroy(catena_routes* routes) noexcept {
  try {
    delete routes;
  } catch (...) {
    (void)caught();
  }
}

void catena_publisher_options_init(catena_publisher_options* options) noexcept {
  if (options == nullptr) return;
  *options = catena_publisher_options{};
  options->size = sizeof(catena_publisher_options);
}

catena_err catena_publisher_create(catena_routes* routes, const char* channel,
                                   catena_publisher** out) noexcept {
  return catena_publisher_create_with(routes, channel, nullptr, out);
}

catena_err catena_publisher_create_with(catena_routes* routes, const char* channel,
                                        const catena_publisher_options* options,
                                        catena_publisher** out) noexcept {
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create: out is NULL");
  *out = nullptr;
  if (routes == nullptr || channel == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create: routes or channel is NULL");
  catena_publisher_options o;
  catena_publisher_options_init(&o);
  if (options != nullptr) {
    if (options->size != sizeof(catena_publisher_options) && options->size != kPublisherOptionsFirst) {
      return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create_with: options.size is " +
                                                   std::to_string(options->size) + ", not " +
                                                   std::to_string(sizeof(catena_publisher_options)) +
                                                   " (fill the options with catena_publisher_options_init)");
    }
    std::memcpy(&o, options, options->size);  // a smaller (earlier) struct keeps the later fields' defaults
  }
  if (o.linger_us < 0)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create_with: linger_us is negative");
  if (o.head_acks_only != 0 && o.head_acks_only != 1)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_create_with: head_acks_only is not 0 or 1");
  try {
    catena::PublisherOptions po;
    if (o.provider != nullptr) po.provider = o.provider;
    po.producer_id = o.producer_id;
    if (o.ring_bytes != 0) po.ring_bytes = o.ring_bytes;
    if (o.max_in_flight != 0) po.max_in_flight = o.max_in_flight;
    po.linger = std::chrono::microseconds(o.linger_us);
    if (o.max_batch_bytes != 0) po.max_batch_bytes = o.max_batch_bytes;
    po.tail_acks = o.head_acks_only == 0;
    po.on_event = event_handler(o.on_event, o.event_opaque);
    auto created = catena::Publisher::create(*routes->routes, channel, po);
    if (!created) return fail(created.error());
    auto p = std::make_unique<catena_publisher>();
    p->routes = routes->routes;
    p->pub = std::move(created.value());
    *out = p.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

catena_err catena_publish(catena_publisher* pub, const void* key, std::size_t key_len, const void* payload,
                          std::size_t payload_len, catena_publish_cb cb, void* opaque) noexcept {
  if (pub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publish: publisher is NULL");
  if ((key == nullptr && key_len != 0) || (payload == nullptr && payload_len != 0))
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publish: NULL key or payload with a length");
  try {
    catena::PublishCallback on_ack = ack_callback(cb, opaque);
    const auto e = pub->pub->publish(bytes(key, key_len), bytes(payload, payload_len), std::move(on_ack));
    if (e != client::ErrorCode::ok) return fail(to_c(e), std::string(client::to_string(e)));
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

namespace {

// catena_publish_record and catena_publish_to: `fn` names the call in
// errors; with a partition, the record goes there (its key is only stored).
catena_err enqueue_record(const char* fn, catena_publisher* pub, const std::uint32_t* partition,
                          const void* key, std::size_t key_len, const catena_header* headers,
                          std::size_t header_count, const void* payload, std::size_t payload_len,
                          catena_publish_cb cb, void* opaque) noexcept {
  const std::string name(fn);
  if (pub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": publisher is NULL");
  if ((key == nullptr && key_len != 0) || (payload == nullptr && payload_len != 0) ||
      (headers == nullptr && header_count != 0))
    return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": NULL key, headers or payload with a length");
  if (header_count > catena::chain::limits::kMaxRecordHeaders)
    return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": more than 64 headers");
  // On the stack: no allocation for the headers' views.
  std::array<catena::HeaderField, catena::chain::limits::kMaxRecordHeaders> fields;
  for (std::size_t i = 0; i < header_count; ++i) {
    const catena_header& h = headers[i];
    if ((h.name == nullptr && h.name_len != 0) || (h.value == nullptr && h.value_len != 0))
      return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": a header with a NULL name or value");
    fields[i] = {{static_cast<const char*>(h.name), h.name_len},
                 {static_cast<const char*>(h.value), h.value_len}};
  }
  const catena::Record record{
      bytes(key, key_len), {fields.data(), header_count}, bytes(payload, payload_len)};
  std::size_t block = 0;
  if (const auto ac =
          catena::chain::attributes_size({record.key, catena::chain_headers(record.headers)}, &block);
      ac != catena::chain::AttributesCheck::ok) {
    return fail(CATENA_ERR_INVALID_ARGUMENT, name + ": " + catena::chain::describe(ac));
  }
  try {
    catena::PublishCallback on_ack = ack_callback(cb, opaque);
    const bool plain = key_len == 0 && header_count == 0;
    const auto e = partition == nullptr ? pub->pub->publish(record, std::move(on_ack))
                   : plain              ? pub->pub->publish_to(*partition, record.payload, std::move(on_ack))
                                        : pub->pub->publish_to(*partition, record, std::move(on_ack));
    if (e != client::ErrorCode::ok) return fail(to_c(e), std::string(client::to_string(e)));
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

}  // namespace

catena_err catena_publish_record(catena_publisher* pub, const void* key, std::size_t key_len,
                                 const catena_header* headers, std::size_t header_count, const void* payload,
                                 std::size_t payload_len, catena_publish_cb cb, void* opaque) noexcept {
  return enqueue_record("catena_publish_record", pub, nullptr, key, key_len, headers, header_count, payload,
                        payload_len, cb, opaque);
}

catena_err catena_publish_to(catena_publisher* pub, std::uint32_t partition, const void* key,
                             std::size_t key_len, const catena_header* headers, std::size_t header_count,
                             const void* payload, std::size_t payload_len, catena_publish_cb cb,
                             void* opaque) noexcept {
  return enqueue_record("catena_publish_to", pub, &partition, key, key_len, headers, header_count, payload,
                        payload_len, cb, opaque);
}

catena_err catena_try_claim(catena_publisher* pub, std::uint32_t partition, std::size_t length,
                            catena_claim* out) noexcept {
  if (pub == nullptr || out == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_try_claim: publisher or claim is NULL");
  try {
    catena::Claim c = pub->pub->try_claim(partition, length);
    if (!c) return fail(to_c(c.error()), std::string(client::to_string(c.error())));
    if (pub->claims.size() <= partition) pub->claims.resize(partition + 1);
    auto& slot = pub->claims[partition];
    slot.claim = std::move(c);  // the slot's was closed: try_claim refuses a second
    slot.id = pub->next_claim++;
    *out = catena_claim{slot.claim.buffer().data(), slot.claim.buffer().size(), partition, 0, slot.id};
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

namespace {
catena_publisher::OpenClaim* open_claim(catena_publisher* pub, const catena_claim* claim) {
  if (pub == nullptr || claim == nullptr || claim->id == 0 || claim->partition >= pub->claims.size())
    return nullptr;
  auto& slot = pub->claims[claim->partition];
  return slot.id == claim->id && slot.claim ? &slot : nullptr;
}
}  // namespace

catena_err catena_commit(catena_publisher* pub, catena_claim* claim, catena_publish_cb cb,
                         void* opaque) noexcept {
  auto* slot = open_claim(pub, claim);
  if (slot == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_commit: the claim is not open");
  try {
    const auto e = pub->pub->commit(slot->claim, ack_callback(cb, opaque));
    slot->id = 0;
    claim->id = 0;
    claim->buffer = nullptr;
    if (e != client::ErrorCode::ok) return fail(to_c(e), std::string(client::to_string(e)));
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

void catena_abort(catena_publisher* pub, catena_claim* claim) noexcept {
  auto* slot = open_claim(pub, claim);
  if (slot == nullptr) return;
  pub->pub->abort(slot->claim);
  slot->id = 0;
  claim->id = 0;
  claim->buffer = nullptr;
}

int catena_publisher_poll(catena_publisher* pub) noexcept {
  if (pub == nullptr)
    return (fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_poll: publisher is NULL"), -1);
  try {
    return pub->pub->poll();
  } catch (...) {
    (void)caught();
    return -1;
  }
}

catena_err catena_publisher_flush(catena_publisher* pub, std::int64_t timeout_ms) noexcept {
  if (pub == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_publisher_flush: publisher is NULL");
  try {
    if (pub->pub->flush(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms))) return CATENA_OK;
    return fail(CATENA_ERR_TIMEOUT,
                "timeout: " + std::to_string(pub->pub->in_flight()) + " records still in flight after flush");
  } catch (...) {
    return caught();
  }
}

std::uint64_t catena_publisher_in_flight(const catena_publisher* pub) noexcept {
  if (pub == nullptr) return 0;
  try {
    return pub->pub->in_flight();
  } catch (...) {
    (void)caught();
    return 0;
  }
}

void catena_publisher_destroy(catena_publisher* pub) noexcept {
  try {
    delete pub;
  } catch (...) {
    (void)caught();
  }
}

void catena_subscriber_options_init(catena_subscriber_options* options) noexcept {
  if (options == nullptr) return;
  *options = catena_subscriber_options{};
  options->size = sizeof(catena_subscriber_options);
  options->start = CATENA_START_EARLIEST;
}

catena_err catena_subscriber_create(catena_routes* routes, const char* channel, catena_start start,
                                    catena_subscriber** out) noexcept {
  if (start != CATENA_START_EARLIEST && start != CATENA_START_LATEST) {
    if (out != nullptr) *out = nullptr;
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create: start is not EARLIEST or LATEST");
  }
  catena_subscriber_options options;
  catena_subscriber_options_init(&options);
  options.start = start;
  return catena_subscriber_create_with(routes, channel, &options, out);
}

catena_err catena_subscriber_create_with(catena_routes* routes, const char* channel,
                                         const catena_subscriber_options* options,
                                         catena_subscriber** out) noexcept {
  if (out == nullptr) return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create: out is NULL");
  *out = nullptr;
  if (routes == nullptr || channel == nullptr)
    return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create: routes or channel is NULL");
  catena_subscriber_options o;
  catena_subscriber_options_init(&o);
  if (options != nullptr) {
    if (options->size != sizeof(catena_subscriber_options) && options->size != kSubscriberOptionsFirst) {
      return fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_create_with: options.size is " +
                                                   std::to_string(options->size) + ", not " +
                                                   std::to_string(sizeof(catena_subscriber_options)) +
                                                   " (fill the options with catena_subscriber_options_init)");
    }
    std::memcpy(&o, options, options->size);  // a smaller (earlier) struct keeps the later fields' defaults
    options = &o;
    if (options->start != CATENA_START_EARLIEST && options->start != CATENA_START_LATEST &&
        options->start != CATENA_START_OFFSET) {
      return fail(CATENA_ERR_INVALID_ARGUMENT,
                  "catena_subscriber_create_with: start is not EARLIEST, LATEST or OFFSET");
    }
    if ((options->partitions == nullptr) != (options->partition_count == 0)) {
      return fail(CATENA_ERR_INVALID_ARGUMENT,
                  "catena_subscriber_create_with: partitions and partition_count must both be set or both "
                  "be NULL/0");
    }
  }
  try {
    catena::SubscriberOptions so;
    if (options != nullptr) {
      if (options->provider != nullptr) so.provider = options->provider;
      so.start = options->start == CATENA_START_EARLIEST ? catena::Start::earliest
                 : options->start == CATENA_START_LATEST ? catena::Start::latest
                                                         : catena::Start::offset;
      so.start_offset = options->start_offset;
      if (options->partitions != nullptr)
        so.partitions.assign(options->partitions, options->partitions + options->partition_count);
      if (options->ring_bytes != 0) so.ring_bytes = options->ring_bytes;
      so.on_event = event_handler(options->on_event, options->event_opaque);
    }
    auto created = catena::Subscriber::create(*routes->routes, channel, so);
    if (!created) return fail(created.error());
    auto s = std::make_unique<catena_subscriber>();
    s->routes = routes->routes;
    s->sub = std::move(created.value());
    *out = s.release();
    return CATENA_OK;
  } catch (...) {
    return caught();
  }
}

int catena_subscriber_poll(catena_subscriber* sub, catena_message_cb cb, void* opaque, int max) noexcept {
  if (sub == nullptr || cb == nullptr || max <= 0)
    return (
        fail(CATENA_ERR_INVALID_ARGUMENT, "catena_subscriber_poll: NULL subscriber or callback, or max <= 0"),
        -1);
  try {
    return sub->sub->poll(
        [cb, opaque](const catena::Message& m) {
          // The headers' views on the stack (at most kMaxRecordHeaders): no allocation per message.
          std::array<catena_header, catena::chain::limits::kMaxRecordHeaders> hs;
          std::size_t n = 0;
          for (const catena::HeaderField& h : m.headers) {
            if (n == hs.size()) break;  // decode_record bounds the count: never taken
            hs[n++] = catena_header{h.name.data(), h.name.size(), h.value.data(), h.value.size()};
          }
          const catena_message c{m.partition,
                                 m.offset,
                                 m.timestamp_ns,
                                 m.payload.data(),
                                 m.payload.size(),
                                 m.key.empty() ? nullptr : m.key.data(),
                                 m.key.size(),
                                 n == 0 ? nullptr : hs.data(),
                                 n};
          cb(opaque, &c);
        },
        max);
  } catch (...) {
    (void)caught();
    return -1;
  }
}

std::uint64_t catena_subscriber_position(const catena_subscriber* sub, std::uint32_t partition) noexcept {
  if (sub == nullptr) return 0;
  try {
    return sub->sub->position(partition);
  } catch (...) {
    (void)caught();
    return 0;
  }
}

void catena_subscriber_destroy(catena_subscriber* sub) noexcept {
  try {
    delete sub;
  } catch (...) {
    (void)caught();
  }
}

}  // extern "C"
