// Reads CHANNEL from its earliest records and prints each payload on a line,
// until COUNT records arrived or nothing came for TIMEOUT_MS.
//
//   subscriber CONTROLLER CHANNEL COUNT [TIMEOUT_MS]
//
// Exits 0 when COUNT records arrived.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <catena/client.hpp>  // the client SDK: connect, Publisher, Subscriber, GroupSubscriber

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s CONTROLLER CHANNEL COUNT [TIMEOUT_MS]\n", argv[0]);
    return 2;
  }
  const std::string channel = argv[2];
  const std::uint64_t count = std::strtoull(argv[3], nullptr, 10);
  const std::chrono::milliseconds timeout(argc == 5 ? std::strtoll(argv[4], nullptr, 10) : 10000);

  // Routes (partition -> chain of replicas) come from the controllers:
  // "host:port[,host:port...]" (a malformed list: invalid_argument).
  catena::ConnectOptions connect_options;
  connect_options.client_name = "example-subscriber";
  auto connected = catena::connect(argv[1], connect_options);
  if (!connected) {
    std::fprintf(stderr, "connect: %s\n", connected.error().describe().c_str());
    return 1;
  }
  catena::RouteSource& routes = *connected.value();

  catena::SubscriberOptions options;
  options.start = catena::Start::earliest;  // or latest, offset, committed (with a group)
  auto subscriber = catena::Subscriber::create(routes, channel, options);
  if (!subscriber) {
    std::fprintf(stderr, "subscriber: %s\n", subscriber.error().describe().c_str());
    return 1;
  }
  catena::Subscriber& sub = *subscriber.value();
  // Not records: a position that expired (TTL), or records lost for good.
  sub.on_notice([](const catena::Notice& n) {
    std::fprintf(stderr, "subscriber: partition %u: %s, continuing at offset %llu\n", n.partition,
                 std::string(catena::client::to_string(n.error())).c_str(),
                 static_cast<unsigned long long>(n.next_offset));
  });

  std::uint64_t received = 0;
  while (received < count) {
    // The handler runs on this thread; the payload is valid during the call
    // only. poll_for waits up to `timeout` for the first record (poll()
    // never waits).
    const int n = sub.poll_for(
        [&](const catena::Message& m) {
          std::fwrite(m.payload.data(), 1, m.payload.size(), stdout);
          std::fputc('\n', stdout);
          ++received;
        },
        timeout);
    if (n == 0) break;  // nothing for `timeout`
  }
  std::fflush(stdout);
  std::fprintf(stderr, "received %llu of %llu\n", static_cast<unsigned long long>(received),
               static_cast<unsigned long long>(count));
  return received == count ? 0 : 1;
}
