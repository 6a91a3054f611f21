"""The Python module `catena` against a live cluster (run by capi_cluster.sh):

    python3 python_client_test.py CONTROLLER CHANNEL

Publishes N records, flushes, subscribes from the earliest record, and
asserts every record arrived once with its payload at the partition and
offset its PublishResult named; and the error path (unknown channel)."""
import sys
import time

import catena

N = 300


def main():
    controller, channel = sys.argv[1], sys.argv[2]
    assert catena.version() and catena.__version__ == catena.version(), catena.version()
    routes = catena.connect(controller)

    try:
        catena.Publisher(routes, "no-such-channel")
        raise AssertionError("a publisher on a missing channel was created")
    except catena.Error as e:
        assert e.code == "unknown_channel", (e.code, str(e))

    pub = catena.Publisher(routes, channel)
    t0 = time.monotonic()
    results = [pub.publish(b"record-%d" % i, key=b"key-%d" % (i % 8)) for i in range(N)]
    pub.flush(timeout_ms=15000)
    assert pub.in_flight == 0, pub.in_flight
    bad = [(i, r) for i, r in enumerate(results) if not (r.done and r.ok and r.status == "ok")]
    assert not bad, bad[:5]
    at = {(r.partition, r.offset): i for i, r in enumerate(results)}
    assert len(at) == N, "%d distinct partition:offset acks, not %d" % (len(at), N)
    print("python: published and acknowledged %d in %.2f s" % (N, time.monotonic() - t0), file=sys.stderr)

    sub = catena.Subscriber(routes, channel, start="earliest")
    got = []
    deadline = time.monotonic() + 10
    while len(got) < N and time.monotonic() < deadline:
        got.extend(sub.poll(max=64, timeout_ms=100))
    assert len(got) == N, "received %d of %d" % (len(got), N)
    seen = set()
    for partition, offset, payload in got:
        assert isinstance(payload, bytes), type(payload)
        i = at.get((partition, offset))
        assert i is not None, "a record at %d:%d nobody published" % (partition, offset)
        assert payload == b"record-%d" % i, (partition, offset, payload, i)
        seen.add(i)
    assert seen == set(range(N)), "missing %s" % sorted(set(range(N)) - seen)[:10]
    for p in {r.partition for r in results}:
        last = max(r.offset for r in results if r.partition == p)
        assert sub.position(p) == last + 1, (p, sub.position(p), last)
    print("python: received %d, ok" % len(got), file=sys.stderr)

    # Keys and headers (catena_publish_record), read back with attributes=True;
    # the records above carry none (publish without headers= only places by key).
    def hs(i):
        return [(b"trace", b"t%d" % i), (b"bin", b"\x00\x01")]

    extra = [pub.publish(b"attr-%d" % i, key=b"k%d" % i, headers=hs(i)) for i in range(3)]
    plain = pub.publish(b"attr-plain", headers=[])
    pub.flush(timeout_ms=15000)
    assert all(r.ok for r in extra + [plain]), extra + [plain]
    want = {(r.partition, r.offset): (b"attr-%d" % i, b"k%d" % i, hs(i)) for i, r in enumerate(extra)}
    want[(plain.partition, plain.offset)] = (b"attr-plain", b"", [])
    for (partition, offset), i in at.items():
        want[(partition, offset)] = (b"record-%d" % i, b"", [])
    sub2 = catena.Subscriber(routes, channel, start="earliest")
    got2 = {}
    deadline = time.monotonic() + 10
    while len(got2) < len(want) and time.monotonic() < deadline:
        for partition, offset, payload, key, headers in sub2.poll(max=64, timeout_ms=100, attributes=True):
            got2[(partition, offset)] = (payload, key, headers)
    assert got2 == want, [(k, got2.get(k), w) for k, w in want.items() if got2.get(k) != w][:5]
    print("python: keys and headers of %d records, ok" % len(want), file=sys.stderr)


if __name__ == "__main__":
    main()
