"""The Python module `catena` against a live cluster (run by capi_cluster.sh):

    python3 python_client_test.py CONTROLLER CHANNEL

Publishes N records, flushes, subscribes from the earliest record, and
asserts every record arrived once with its payload at the partition and
offset its PublishResult named; the error path (unknown channel); options,
publish(partition=), events, notices, seek, commit and a group member."""
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

    for bad in ({"ring_shrink_after_ms": -2}, {"ring_budget_bytes": 1000}):
        try:
            catena.Publisher(routes, channel, **bad)
            raise AssertionError("a publisher with %r was created" % bad)
        except catena.Error as e:
            assert e.code == "invalid_argument", (bad, e.code, str(e))
    pub = catena.Publisher(routes, channel, ring_shrink_after_ms=-1)  # never shrinks
    t0 = time.monotonic()
    results = [pub.publish(b"record-%d" % i, key=b"key-%d" % (i % 8)) for i in range(N)]
    pub.flush(timeout_ms=15000)
    assert pub.in_flight == 0, pub.in_flight
    assert pub.ring_bytes >= 64 << 10, pub.ring_bytes  # a ring for each partition it published to
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

    # Notices: the full log read from offset 0, whose first segments were
    # reused long ago: position_expired says where delivery resumes (read
    # from the head this time).
    notices = []
    sub4 = catena.Subscriber(routes, channel + "-full", start=0, read_from="head",
                             on_notice=lambda status, partition, next_offset, lost_from:
                             notices.append((status, partition, next_offset)))
    end = held2[-1].offset + 1
    got4 = []
    deadline = time.monotonic() + 10
    while sub4.position(0) < end and time.monotonic() < deadline:
        got4.extend(sub4.poll(max=256, timeout_ms=100))
    assert notices and all(n[0] == "position_expired" and n[1] == 0 for n in notices), notices
    assert 0 < notices[0][2] <= end and sub4.position(0) == end, (notices, sub4.position(0), end)
    offsets = [o for _, o, _ in got4]
    assert offsets == sorted(set(offsets)) and all(o >= notices[0][2] for o in offsets), offsets[:5]
    assert not offsets or offsets[-1] == end - 1, (offsets[-1], end)
    for bad, kind in (({"read_from": "middle"}, ValueError), ({"stall_check_ms": -1}, catena.Error),
                      ({"start": "committed"}, catena.Error)):
        try:
            catena.Subscriber(routes, channel, **bad)
            raise AssertionError("a subscriber with %s was created" % bad)
        except kind:
            pass
    print("python: on_notice (%s), ok" % (notices,), file=sys.stderr)

    # seek, commit and start="committed": read partition 3 to its end, seek
    # back to the 6th publish(partition=3) record, commit at the 11th; a new
    # subscriber of the group starts there.
    sub5 = catena.Subscriber(routes, channel, partitions=[3], group="py-c", stall_check_ms=500,
                             connect_timeout_ms=2000, delivery_stall_ms=2000)
    end3 = to[-1].offset + 1
    deadline = time.monotonic() + 10
    while sub5.position(3) < end3 and time.monotonic() < deadline:
        sub5.poll(max=256, timeout_ms=100)
    assert sub5.position(3) == end3, (sub5.position(3), end3)
    sub5.seek(3, to[5].offset)
    again = []
    deadline = time.monotonic() + 10
    while len(again) < 15 and time.monotonic() < deadline:
        again.extend(sub5.poll(max=256, timeout_ms=100))
    assert again == [(3, r.offset, b"to-%d" % (5 + i)) for i, r in enumerate(to[5:])], again
    try:
        sub5.seek(0, 0)
        raise AssertionError("a seek on a partition the subscriber does not read")
    except catena.Error as e:
        assert e.code == "invalid_argument", (e.code, str(e))
    sub5.seek(3, to[10].offset)
    sub5.commit()
    del sub5
    sub6 = catena.Subscriber(routes, channel, start="committed", group="py-c", partitions=[3])
    resumed = []
    deadline = time.monotonic() + 10
    while len(resumed) < 10 and time.monotonic() < deadline:
        resumed.extend(sub6.poll(max=256, timeout_ms=100))
    assert resumed == [(3, r.offset, b"to-%d" % (10 + i)) for i, r in enumerate(to[10:])], resumed
    print("python: seek, commit, start=committed, ok", file=sys.stderr)

    # A group member, the only one: every partition is its, every record of
    # the channel is handed over once and in order, and what it committed on
    # leaving is each partition's end.
    for bad, kind in (({"start": 5}, ValueError), ({"commit_interval_ms": -1}, ValueError)):
        try:
            catena.Group(routes, channel, "py-grp", **bad)
            raise AssertionError("a group member with %s was created" % bad)
        except kind:
            pass
    total = N + 4 + 20 + 20
    nxt = {}
    disorder = []
    with catena.Group(routes, channel, "py-grp", member_name="py-member", commit_interval_ms=0,
                      join_timeout_ms=10000) as g:
        assert g.partitions == [0, 1, 2, 3], g.partitions
        count = 0
        deadline = time.monotonic() + 15
        while count < total and time.monotonic() < deadline:
            for partition, offset, _ in g.poll(max=256, timeout_ms=100):
                count += 1
                if offset != nxt.get(partition, 0):
                    disorder.append((partition, offset))
                nxt[partition] = offset + 1
        assert count == total and not disorder, (count, total, disorder[:5])
        g.commit()
        deadline = time.monotonic() + 5
        while g.stats()["commits"] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        st = g.stats()
        assert st["joins"] == 1 and st["commits"] >= 1, st
        assert st["commit_refusals"] == 0 and st["revoked"] == 0, st
    assert g.partitions == [], g.partitions
    sub7 = catena.Subscriber(routes, channel, start="committed", group="py-grp")
    assert sub7.poll(max=256, timeout_ms=500) == []
    assert {p: sub7.position(p) for p in range(4)} == nxt, ({p: sub7.position(p) for p in range(4)}, nxt)
    print("python: a group member handed %d records, ok" % count, file=sys.stderr)

    # Channel administration through the routes.
    info = routes.create_channel("py-admin", partitions=3, replication=2, ttl_ms=60000)
    assert (info.name, info.partitions, info.replication, info.ttl_ms, info.segment_bytes) == (
        "py-admin", 3, 2, 60000, 64 << 20), info
    assert info.routed_partitions == 3 and not info.altering, info
    try:
        routes.create_channel("py-admin")
        raise AssertionError("a second create_channel did not raise")
    except catena.Error as e:
        assert e.code == "invalid_argument" and "exists" in str(e), (e.code, str(e))
    try:
        routes.describe_channel("no-such-channel")
        raise AssertionError("describe_channel of a missing channel did not raise")
    except catena.Error as e:
        assert e.code == "unknown_channel", e.code
    chains = routes.channel_chains("py-admin")
    assert [c.partition for c in chains] == [0, 1, 2], chains
    for c in chains:
        assert len(c.nodes) == 2 and len(set(c.nodes)) == 2 and c.epoch >= 1 and c.start_offset == 0, c
    names = [c.name for c in routes.list_channels()]
    assert names == sorted(names) and channel in names and "py-admin" in names, names
    info = routes.alter_channel("py-admin", partitions=4, ttl_ms=120000)
    assert (info.partitions, info.ttl_ms, info.routed_partitions) == (4, 120000, 4), info
    assert routes.describe_channel("py-admin").partitions == 4
    pub9 = catena.Publisher(routes, "py-admin")
    r = pub9.publish(b"p3", partition=3)
    pub9.flush()
    assert r.ok and r.partition == 3 and r.offset == 1, r  # after the alter's marker at offset 0
    try:
        routes.alter_channel("py-admin")
        raise AssertionError("alter_channel without a change did not raise")
    except ValueError:
        pass
    # The alter's markers: a Marker at offset 0 of every partition with
    # control_records=True; with markers_released_by_caller=True each
    # partition stops after its marker until released.
    with catena.Subscriber(routes, "py-admin", control_records=True) as ms:
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 5 and time.monotonic() < deadline:
            got += ms.poll(timeout_ms=200)
        markers = [m for m in got if isinstance(m, catena.Marker)]
        records = [m for m in got if not isinstance(m, catena.Marker)]
        assert sorted(m.partition for m in markers) == [0, 1, 2, 3], got
        assert all(m.offset == 0 and m.generation == markers[0].generation >= 1 for m in markers), got
        assert records == [(3, 1, b"p3")], got
        assert all(ms.marker_reached(p) == markers[0].generation for p in range(4))
        assert not any(ms.held_at_marker(p) for p in range(4))
        assert "generation=" in repr(markers[0]), repr(markers[0])
        try:
            ms.release_markers(0, markers[0].generation)
            raise AssertionError("release_markers without markers_released_by_caller did not raise")
        except catena.Error as e:
            assert e.code == "invalid_argument", e.code
    generation = markers[0].generation
    with catena.Subscriber(routes, "py-admin", control_records=True, markers_released_by_caller=True) as ms:
        got = []
        deadline = time.monotonic() + 15
        while not all(ms.held_at_marker(p) for p in range(4)) and time.monotonic() < deadline:
            got += ms.poll(timeout_ms=50)
        assert all(ms.held_at_marker(p) for p in range(4)), got
        assert sorted(m.partition for m in got if isinstance(m, catena.Marker)) == [0, 1, 2, 3], got
        assert [ms.position(p) for p in range(4)] == [0, 0, 0, 0]
        for p in range(4):
            ms.release_markers(p, generation)
        deadline = time.monotonic() + 15
        after = []
        while not after and time.monotonic() < deadline:
            after += ms.poll(timeout_ms=200)
        assert after == [(3, 1, b"p3")], after
    routes.delete_channel("py-admin")
    try:
        routes.describe_channel("py-admin")
        raise AssertionError("describe_channel after delete_channel did not raise")
    except catena.Error as e:
        assert e.code == "unknown_channel", e.code
    print("python: channel administration, ok", file=sys.stderr)

    # Tenant administration: a tenant held to its namespace and quota, its
    # quotas and use listed, raised, its token rotated, deleted when empty.
    token = routes.create_tenant("pyt", max_channels=1, zones=["zone-a", "zone-b", "zone-c"])
    assert len(token) == 64, token
    try:
        routes.create_tenant("pyt2", max_chanels=1)
        raise AssertionError("an unknown quota keyword was taken")
    except TypeError as e:
        assert "max_chanels" in str(e), str(e)
    try:
        routes.create_tenant("pyt2", zones="zone-a")
        raise AssertionError("zones given as a string were taken")
    except TypeError as e:
        assert "not a string" in str(e), str(e)
    as_tenant = catena.connect(controller, token=token)
    as_tenant.create_channel("pyt.orders", replication=1)
    try:
        as_tenant.create_channel("pyt.more", replication=1)
        raise AssertionError("a channel past max_channels was created")
    except catena.Error as e:
        assert e.code == "invalid_argument" and "max_channels" in str(e), (e.code, str(e))
    try:
        as_tenant.create_channel("elsewhere", replication=1)
        raise AssertionError("a channel outside the tenant's namespace was created")
    except catena.Error as e:
        assert e.code == "unauthenticated", e.code
    try:
        as_tenant.create_tenant("pyt3")
        raise AssertionError("a tenant created a tenant")
    except catena.Error as e:
        assert e.code == "unauthenticated", e.code
    (t,) = [t for t in routes.list_tenants() if t.name == "pyt"]
    assert (t.max_channels, t.max_partitions, t.zones, t.channels, t.partitions) == (
        1, -1, ["zone-a", "zone-b", "zone-c"], 1, 1), t
    assert t.created_at_ms > 0, t
    routes.alter_tenant("pyt", max_channels=2)
    as_tenant.create_channel("pyt.more", replication=1)
    (t,) = [t for t in routes.list_tenants() if t.name == "pyt"]
    assert (t.max_channels, t.zones, t.channels) == (2, [], 2), t
    rotated = routes.rotate_tenant_token("pyt")
    assert len(rotated) == 64 and rotated != token
    try:
        as_tenant.describe_channel("pyt.orders")
        raise AssertionError("the old token still works")
    except catena.Error as e:
        assert e.code == "unauthenticated", e.code
    as_tenant = catena.connect(controller, token=rotated)
    assert as_tenant.describe_channel("pyt.orders").name == "pyt.orders"
    try:
        routes.delete_tenant("pyt")
        raise AssertionError("a tenant owning channels was deleted")
    except catena.Error as e:
        assert e.code == "invalid_argument" and "owns 2 channel" in str(e), (e.code, str(e))
    as_tenant.delete_channel("pyt.orders")
    as_tenant.delete_channel("pyt.more")
    routes.delete_tenant("pyt")
    assert "pyt" not in [t.name for t in routes.list_tenants()]
    print("python: tenant administration, ok", file=sys.stderr)

    # close() and with-blocks: a publisher flushes before it goes.
    with catena.Publisher(routes, channel) as pub10:
        results = [pub10.publish(b"closing-%d" % i, partition=1) for i in range(20)]
    assert all(r.ok for r in results), [r.status for r in results if not r.ok]
    offsets = [r.offset for r in results]
    assert offsets == list(range(offsets[0], offsets[0] + 20)), offsets
    pub10.close()  # a second close does nothing
    try:
        pub10.publish(b"late")
        raise AssertionError("publish on a closed publisher did not raise")
    except ValueError as e:
        assert "closed" in str(e), str(e)
    with catena.Subscriber(routes, channel, start=offsets[0], partitions=[1]) as sub10:
        got = []
        while len(got) < 20:
            batch = sub10.poll(max=64, timeout_ms=5000)
            assert batch, "nothing for 5 s after %d of 20" % len(got)
            got += [(o, p) for _, o, p in batch]
    assert got == [(offsets[0] + i, b"closing-%d" % i) for i in range(20)], got[:3]
    try:
        sub10.poll()
        raise AssertionError("poll on a closed subscriber did not raise")
    except ValueError as e:
        assert "closed" in str(e), str(e)
    print("python: close() and with-blocks, ok", file=sys.stderr)


if __name__ == "__main__":
    main()
