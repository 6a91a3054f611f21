#!/usr/bin/env python3
"""The Python module (import catena): publishes COUNT records ("record-0",
"record-1", ...) to CHANNEL, waits until each is acknowledged, then reads the
channel from its earliest record and prints each payload on a line.

    pubsub.py CONTROLLER CHANNEL COUNT      e.g. pubsub.py 127.0.0.1:7400 orders 1000

Exits 0 when all COUNT were acknowledged and COUNT records arrived. The
module comes with the python3-catena package (or `cmake --install`: PREFIX/
lib/python3/dist-packages, on PYTHONPATH unless PREFIX is /usr).
"""
import sys

import catena


def main() -> int:
    if len(sys.argv) != 4:
        print(f"usage: {sys.argv[0]} CONTROLLER CHANNEL COUNT", file=sys.stderr)
        return 2
    controllers, channel, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(f"pubsub.py: {catena.__file__}", file=sys.stderr)
    routes = catena.connect(controllers)

    pub = catena.Publisher(routes, channel)
    # Same key, same partition, in order; publish() waits while back-pressured.
    results = [pub.publish(f"record-{i}".encode(), key=f"key-{i % 16}".encode()) for i in range(count)]
    pub.flush(timeout_ms=30000)  # raises catena.Error if any record is not acknowledged
    acknowledged = sum(1 for r in results if r.status == "ok")
    print(f"pubsub.py: published {count}, acknowledged {acknowledged}", file=sys.stderr)

    sub = catena.Subscriber(routes, channel, start="earliest")
    received = 0
    while received < count:
        batch = sub.poll(max=1024, timeout_ms=10000)
        if not batch:
            break  # nothing for 10 s
        for _partition, _offset, payload in batch:
            print(payload.decode())
            received += 1
    print(f"pubsub.py: received {received} of {count}", file=sys.stderr)
    return 0 if acknowledged == count and received == count else 1


if __name__ == "__main__":
    sys.exit(main())
