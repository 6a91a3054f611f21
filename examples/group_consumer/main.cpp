// One member of subscriber group GROUP on CHANNEL: consumes the partitions
// the controller assigns it for SECONDS, then commits its positions and
// leaves. Run several at once and they share the partitions; run one again
// and it continues where the group committed.
//
//   group_consumer CONTROLLER CHANNEL GROUP SECONDS
//
// Prints the records' payloads on stdout; on stderr, the partitions it
// held and how many records it consumed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <catena/client.hpp>  // the client SDK: connect, Publisher, Subscriber, GroupSubscriber

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s CONTROLLER CHANNEL GROUP SECONDS\n", argv[0]);
    return 2;
  }
  const std::string channel = argv[2];
  const std::chrono::seconds run_for(std::strtoll(argv[4], nullptr, 10));

  // Routes (partition -> chain of replicas) come from the controllers:
  // "host:port[,host:port...]" (a malformed list: invalid_argument).
  catena::ConnectOptions connect_options;
  connect_options.client_name = "example-group-consumer";
  auto connected = catena::connect(argv[1], connect_options);
  if (!connected) {
    std::fprintf(stderr, "connect: %s\n", connected.error().describe().c_str());
    return 1;
  }
  catena::RouteSource& routes = *connected.value();

  catena::GroupSubscriberOptions options;
  options.controller = argv[1];  // the group coordinator
  options.group = argv[3];
  options.member_name = "example-group-consumer";
  options.subscriber.start = catena::Start::earliest;  // where a partition the group never committed begins
  // Positions are committed every commit_interval; before each commit, what
  // was handed out must be finished with (here: written out).
  options.before_commit = [] { std::fflush(stdout); };
  auto member = catena::GroupSubscriber::create(routes, channel, options);  // waits for the first assignment
  if (!member) {
    std::fprintf(stderr, "group_consumer: %s\n", member.error().describe().c_str());
    return 1;
  }
  catena::GroupSubscriber& group = *member.value();

  std::uint64_t consumed = 0;
  const auto end = std::chrono::steady_clock::now() + run_for;
  while (std::chrono::steady_clock::now() < end) {
    group.poll_for(
        [&](const catena::Message& m) {
          std::fwrite(m.payload.data(), 1, m.payload.size(), stdout);
          std::fputc('\n', stdout);
          ++consumed;
        },
        std::chrono::milliseconds(100));
  }
  std::string held;
  for (const auto p : group.partitions()) held += (held.empty() ? "" : ",") + std::to_string(p);
  std::fprintf(stderr, "consumed %llu records from partitions [%s]\n",
               static_cast<unsigned long long>(consumed), held.c_str());
  return 0;  // ~GroupSubscriber commits the last positions and leaves the group
}
