// Publishes COUNT records ("record-0", "record-1", ...) to CHANNEL and waits
// until every one is acknowledged (committed by every replica).
//
//   publisher CONTROLLER CHANNEL COUNT      e.g. publisher 127.0.0.1:7400 orders 1000
//
// Prints "partition:offset" per acknowledged record on stdout, a summary on
// stderr; exits 0 when all COUNT were acknowledged.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include <catena/client.hpp>  // the client SDK: connect, Publisher, Subscriber, GroupSubscriber

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CONTROLLER CHANNEL COUNT\n", argv[0]);
    return 2;
  }
  const std::string channel = argv[2];
  const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
  std::fprintf(stderr, "catena headers %s, library %s\n", CATENA_VERSION, catena_version());

  // Routes (partition -> chain of replicas) come from the controllers:
  // "host:port[,host:port...]" (a malformed list: invalid_argument).
  catena::ConnectOptions connect_options;
  connect_options.client_name = "example-publisher";
  auto connected = catena::connect(argv[1], connect_options);
  if (!connected) {
    std::fprintf(stderr, "connect: %s\n", connected.error().describe().c_str());
    return 1;
  }
  catena::RouteSource& routes = *connected.value();

  catena::PublisherOptions options;  // provider "soft": shared memory or TCP to the brokers
  auto publisher = catena::Publisher::create(routes, channel, options);
  if (!publisher) {
    std::fprintf(stderr, "publisher: %s\n", publisher.error().describe().c_str());
    return 1;
  }
  catena::Publisher& pub = *publisher.value();

  std::uint64_t acknowledged = 0;
  std::uint64_t failed = 0;
  // Runs on this thread, inside poll() or flush().
  auto on_ack = [&](const catena::PublishResult& r) {
    if (r.status == catena::client::ErrorCode::ok) {
      ++acknowledged;
      std::printf("%u:%llu\n", r.partition, static_cast<unsigned long long>(r.offset));
    } else {
      ++failed;
      std::fprintf(stderr, "publisher: a record failed: %s\n",
                   std::string(catena::client::to_string(r.status)).c_str());
    }
  };

  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string key = "key-" + std::to_string(i % 16);  // same key, same partition, in order
    const std::string payload = "record-" + std::to_string(i);
    for (;;) {
      const auto e = pub.publish(std::as_bytes(std::span(key)), std::as_bytes(std::span(payload)), on_ack);
      if (e == catena::client::ErrorCode::ok) break;
      if (e != catena::client::ErrorCode::backpressure) {
        std::fprintf(stderr, "publisher: %s\n", std::string(catena::client::to_string(e)).c_str());
        return 1;
      }
      pub.poll();  // a full window or ring: take acknowledgements, then retry
    }
    pub.poll();
  }
  if (!pub.flush(std::chrono::seconds(30))) std::fprintf(stderr, "publisher: flush timed out\n");
  std::fprintf(stderr, "published %llu, acknowledged %llu, failed %llu\n",
               static_cast<unsigned long long>(count), static_cast<unsigned long long>(acknowledged),
               static_cast<unsigned long long>(failed));
  return acknowledged == count ? 0 : 1;
}
