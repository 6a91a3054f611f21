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

    # Options: another provider, a producer id, a linger; a subscriber of one
    # partition from an offset on that provider.
    for bad, code in (({"provider": "nope"}, "invalid_argument"), ({"linger_us": -1}, "invalid_argument")):
        try:
            catena.Publisher(routes, channel, **bad)
            raise AssertionError("a publisher with %s was created" % bad)
        except catena.Error as e:
            assert e.code == code, (bad, e.code, str(e))
    pub2 = catena.Publisher(routes, channel, provider="soft:tcp", producer_id=777, linger_us=200)
    more = [pub2.publish(b"opt-%d" % i, key=b"one-key") for i in range(20)]
    pub2.flush(timeout_ms=15000)
    assert all(r.ok for r in more), more
    part = more[0].partition
    assert [r.offset for r in more] == list(range(more[0].offset, more[0].offset + 20)), more
    assert all(r.partition == part for r in more), more
    sub3 = catena.Subscriber(routes, channel, start=more[10].offset, provider="soft:tcp", partitions=[part])
    got3 = []
    deadline = time.monotonic() + 10
    while len(got3) < 10 and time.monotonic() < deadline:
        got3.extend(sub3.poll(max=64, timeout_ms=100))
    assert got3 == [(part, r.offset, b"opt-%d" % (10 + i)) for i, r in enumerate(more[10:])], got3
    for bad, kind in (({"start": "middle"}, ValueError), ({"start": -1}, ValueError), ({"start": 1.5}, TypeError),
                      ({"partitions": []}, ValueError)):
        try:
            catena.Subscriber(routes, channel, **bad)
            raise AssertionError("a subscriber with %s was created" % bad)
        except kind:
            pass
    try:
        catena.Subscriber(routes, channel, partitions=[99])
        raise AssertionError("a subscriber of partition 99 was created")
    except catena.Error as e:
        assert e.code == "invalid_argument" and "partition 99 does not exist" in str(e), (e.code, str(e))
    print("python: options, ok", file=sys.stderr)

    # publish(partition=...): to that partition, the key stored; acks from
    # the heads only, small batches.
    pub3 = catena.Publisher(routes, channel, head_acks_only=True, max_batch_bytes=4096)
    to = [pub3.publish(b"to-%d" % i, key=b"kk", headers=[], partition=3) for i in range(20)]
    pub3.flush(timeout_ms=15000)
    assert all(r.ok and r.partition == 3 for r in to), to
    assert [r.offset for r in to] == list(range(to[0].offset, to[0].offset + 20)), to
    try:
        pub3.publish(b"x", partition=99)
        raise AssertionError("a record to partition 99 was queued")
    except catena.Error as e:
        assert e.code == "invalid_argument", (e.code, str(e))

    # A log that fills within its ttl (capi_cluster.sh's "<channel>-full"):
    # the head holds records back and on_event says why; none is lost.
    events = []
    full = catena.Publisher(routes, channel + "-full",
                            on_event=lambda kind, partition, message: events.append((kind, partition, message)))
    blob = b"b" * 1000
    held = [full.publish(blob, partition=0) for _ in range(1200)]
    full.flush(timeout_ms=15000)
    assert [r.offset for r in held] == list(range(1200)) and all(r.ok for r in held), held[:3]
    kinds = [k for k, _, _ in events]
    assert "log_full" in kinds, events
    kind, partition, message = events[kinds.index("log_full")]
    assert partition == 0 and "log is full" in message and "ttl 500 ms" in message, message
    print("python: publish(partition=), on_event (%s), ok" % message, file=sys.stderr)

    # A callable that raises loses no record: the error is reported as
    # unraisable, and the call that delivered the event returns as usual.
    unraisable = []
    sys.unraisablehook = unraisable.append

    def broken(kind, partition, message):
        raise RuntimeError("on_event failed on " + kind)

    full2 = catena.Publisher(routes, channel + "-full", on_event=broken)
    held2 = [full2.publish(blob, partition=0) for _ in range(1200)]
    full2.flush(timeout_ms=15000)
    sys.unraisablehook = sys.__unraisablehook__
    assert all(r.ok for r in held2), held2[:3]
    assert [r.offset for r in held2] == list(range(held2[0].offset, held2[0].offset + 1200)), held2[:3]
    assert any("on_event failed on log_full" in str(u.exc_value) for u in unraisable), unraisable
    print("python: a raising on_event, ok", file=sys.stderr)


if __name__ == "__main__":
    main()
