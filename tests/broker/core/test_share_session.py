"""Share sessions: epochs, the cache cap, connections and partitions (kafka-reference §2.5)."""

from quafka.broker.core.share_session import ShareSession, ShareSessionCache
from quafka.protocol.errors import ErrorCode
from quafka.protocol.share_session_epoch import FINAL_EPOCH, INITIAL_EPOCH, INT32_MAX, next_epoch

G = "group"


def opened(cache, group_id, member_id, connection):
    """Open a session with an epoch-0 request and serve it, as the shell does (it advances the
    epoch after the request): the next request must carry epoch 1."""
    session, replaced = cache.open(group_id, member_id, connection)
    if session is not None:
        cache.advance(session)
    return session, replaced


def test_initial_and_final_epochs_are_zero_and_minus_one():
    assert (INITIAL_EPOCH, FINAL_EPOCH, INT32_MAX) == (0, -1, 2**31 - 1)


def test_epoch_zero_opens_a_session_expecting_epoch_one():
    cache = ShareSessionCache(10)
    session, replaced = cache.open(G, "m1", "conn-1")
    assert replaced is None
    assert session.epoch == INITIAL_EPOCH  # the opening request itself carries epoch 0
    cache.advance(session)
    assert session.epoch == 1 and session.key == (G, "m1") and session.connection == "conn-1"
    assert session.partitions == {}
    assert len(cache) == 1
    assert cache.check(G, "m1", 1) == (session, ErrorCode.none)


def test_each_request_advances_the_epoch_by_one():
    cache = ShareSessionCache(10)
    session, _ = opened(cache, G, "m1", "c")
    for epoch in range(1, 6):
        found, error = cache.check(G, "m1", epoch)
        assert (found, error) == (session, ErrorCode.none)
        cache.advance(found)
    assert session.epoch == 6


def test_a_wrong_epoch_is_invalid_share_session_epoch_and_changes_nothing():
    cache = ShareSessionCache(10)
    session, _ = opened(cache, G, "m1", "c")
    for wrong in (0, 2, 7, -2, INT32_MAX):
        assert cache.check(G, "m1", wrong) == (None, ErrorCode.invalid_share_session_epoch)
    assert session.epoch == 1
    assert cache.check(G, "m1", 1) == (session, ErrorCode.none)


def test_an_acknowledge_at_epoch_zero_on_an_open_session_is_an_invalid_epoch():
    cache = ShareSessionCache(10)
    opened(cache, G, "m1", "c")
    assert cache.check(G, "m1", INITIAL_EPOCH)[1] == ErrorCode.invalid_share_session_epoch


def test_an_unknown_session_is_share_session_not_found():
    cache = ShareSessionCache(10)
    opened(cache, G, "m1", "c")
    assert cache.check(G, "m2", 1) == (None, ErrorCode.share_session_not_found)
    assert cache.check("other-group", "m1", 1) == (None, ErrorCode.share_session_not_found)


def test_the_final_epoch_without_a_session_is_share_session_not_found():
    cache = ShareSessionCache(10)
    assert cache.check(G, "m1", FINAL_EPOCH) == (None, ErrorCode.share_session_not_found)


def test_the_final_epoch_finds_the_session_whatever_its_epoch_and_close_removes_it():
    cache = ShareSessionCache(10)
    session, _ = opened(cache, G, "m1", "c")
    cache.advance(session)
    cache.advance(session)
    assert cache.check(G, "m1", FINAL_EPOCH) == (session, ErrorCode.none)
    assert cache.close(G, "m1") is session
    assert len(cache) == 0
    assert cache.check(G, "m1", 3) == (None, ErrorCode.share_session_not_found)
    assert cache.close(G, "m1") is None


def test_epoch_zero_replaces_an_existing_session_and_resets_its_state():
    cache = ShareSessionCache(10)
    old, _ = opened(cache, G, "m1", "c1")
    old.add([("t", 0), ("t", 1)])
    cache.advance(old)
    cache.advance(old)
    new, replaced = opened(cache, G, "m1", "c2")
    assert replaced is old
    assert new is not old
    assert new.epoch == 1 and new.partitions == {} and new.connection == "c2"
    assert len(cache) == 1
    assert cache.check(G, "m1", 3) == (None, ErrorCode.invalid_share_session_epoch)
    assert cache.check(G, "m1", 1) == (new, ErrorCode.none)


def test_the_epoch_wraps_from_int32_max_to_one():
    assert next_epoch(1) == 2
    assert next_epoch(INT32_MAX - 1) == INT32_MAX
    assert next_epoch(INT32_MAX) == 1
    cache = ShareSessionCache(1)
    session, _ = opened(cache, G, "m1", "c")
    session.epoch = INT32_MAX
    assert cache.check(G, "m1", INT32_MAX) == (session, ErrorCode.none)
    cache.advance(session)
    assert session.epoch == 1
    assert cache.check(G, "m1", 1) == (session, ErrorCode.none)
    assert cache.check(G, "m1", 0)[1] == ErrorCode.invalid_share_session_epoch


def test_the_same_member_id_in_two_groups_has_two_sessions():
    cache = ShareSessionCache(10)
    a, _ = opened(cache, "g1", "m", "c")
    b, _ = opened(cache, "g2", "m", "c")
    assert a is not b and len(cache) == 2
    cache.advance(a)
    assert cache.check("g1", "m", 2) == (a, ErrorCode.none)
    assert cache.check("g2", "m", 1) == (b, ErrorCode.none)


# ---------------------------------------------------------------- the cap


def test_a_new_session_beyond_max_sessions_is_refused_and_live_sessions_stay():
    cache = ShareSessionCache(2)
    s1, _ = opened(cache, G, "m1", "c1")
    s2, _ = opened(cache, G, "m2", "c2")
    assert not cache.has_room_for(G, "m3")
    assert opened(cache, G, "m3", "c3") == (None, None)
    assert len(cache) == 2
    assert cache.check(G, "m1", 1) == (s1, ErrorCode.none)
    assert cache.check(G, "m2", 1) == (s2, ErrorCode.none)
    assert cache.check(G, "m3", 1) == (None, ErrorCode.share_session_not_found)
    assert cache.evictions == 0


def test_replacing_an_existing_session_is_allowed_when_the_cache_is_full():
    cache = ShareSessionCache(2)
    opened(cache, G, "m1", "c1")
    s2, _ = opened(cache, G, "m2", "c2")
    assert cache.has_room_for(G, "m1")
    new, replaced = opened(cache, G, "m1", "c1")
    assert new is not None and replaced is not None
    assert len(cache) == 2
    assert cache.check(G, "m2", 1) == (s2, ErrorCode.none)


def test_idle_sessions_are_never_evicted_to_make_room():
    cache = ShareSessionCache(1)
    idle, _ = opened(cache, G, "idle", "c1")
    for i in range(5):
        assert opened(cache, G, f"new-{i}", f"c{i + 2}") == (None, None)
    assert cache.check(G, "idle", 1) == (idle, ErrorCode.none)
    assert cache.evictions == 0


def test_closing_a_session_makes_room_for_a_new_one():
    cache = ShareSessionCache(1)
    opened(cache, G, "m1", "c1")
    assert opened(cache, G, "m2", "c2") == (None, None)
    cache.close(G, "m1")
    assert cache.has_room_for(G, "m2")
    session, replaced = opened(cache, G, "m2", "c2")
    assert session is not None and replaced is None


# ---------------------------------------------------------------- connections and members


def test_remove_connection_removes_its_sessions_and_counts_evictions():
    cache = ShareSessionCache(10)
    a, _ = opened(cache, G, "m1", "conn-a")
    b, _ = opened(cache, "g2", "m2", "conn-a")
    c, _ = opened(cache, G, "m3", "conn-b")
    gone = cache.remove_connection("conn-a")
    assert {s.key for s in gone} == {a.key, b.key}
    assert cache.evictions == 2
    assert len(cache) == 1
    assert cache.check(G, "m3", 1) == (c, ErrorCode.none)
    assert cache.check(G, "m1", 1)[1] == ErrorCode.share_session_not_found
    assert cache.remove_connection("conn-a") == []
    assert cache.evictions == 2


def test_a_disconnect_frees_room_for_a_refused_member():
    cache = ShareSessionCache(2)
    opened(cache, G, "m1", "c1")
    opened(cache, G, "m2", "c2")
    assert opened(cache, G, "m3", "c3") == (None, None)
    cache.remove_connection("c1")
    assert opened(cache, G, "m3", "c3")[0] is not None


def test_a_replaced_session_moves_to_the_new_connection():
    cache = ShareSessionCache(10)
    opened(cache, G, "m1", "old-conn")
    new, _ = opened(cache, G, "m1", "new-conn")
    assert cache.remove_connection("old-conn") == []
    assert cache.check(G, "m1", 1) == (new, ErrorCode.none)
    assert cache.remove_connection("new-conn") == [new]


def test_close_and_remove_member_are_not_evictions():
    cache = ShareSessionCache(10)
    opened(cache, G, "m1", "c")
    opened(cache, G, "m2", "c")
    assert cache.close(G, "m1") is not None
    assert cache.remove_member(G, "m2") is not None
    assert cache.remove_member(G, "m2") is None
    assert len(cache) == 0 and cache.evictions == 0


# ---------------------------------------------------------------- partitions


def test_partitions_are_added_once_in_order_and_forgotten():
    session = ShareSession(G, "m1", "c")
    session.add([("t1", 0), ("t1", 1), ("t2", 0)])
    session.add([("t1", 1), ("t3", 5)])  # re-adding keeps the first position
    assert list(session.partitions) == [("t1", 0), ("t1", 1), ("t2", 0), ("t3", 5)]
    session.forget([("t1", 1), ("unknown", 9)])
    assert list(session.partitions) == [("t1", 0), ("t2", 0), ("t3", 5)]


def test_partitions_rotate_one_step_per_request():
    session = ShareSession(G, "m1", "c")
    assert session.rotated() == []
    session.add(["a", "b", "c"])
    assert session.rotated() == ["a", "b", "c"]
    assert session.rotated() == ["b", "c", "a"]
    assert session.rotated() == ["c", "a", "b"]
    assert session.rotated() == ["a", "b", "c"]


def test_rotation_survives_partitions_being_forgotten():
    session = ShareSession(G, "m1", "c")
    session.add(["a", "b", "c", "d"])
    session.rotated()
    session.rotated()
    session.rotated()  # next would start at "d"
    session.forget(["d", "a"])
    order = session.rotated()
    assert sorted(order) == ["b", "c"]
    assert session.rotated() == [order[1], order[0]]


def test_every_partition_leads_once_per_cycle():
    session = ShareSession(G, "m1", "c")
    keys = [("t", i) for i in range(5)]
    session.add(keys)
    firsts = [session.rotated()[0] for _ in range(len(keys))]
    assert sorted(firsts) == keys


def test_partition_count_sums_over_sessions():
    cache = ShareSessionCache(10)
    a, _ = opened(cache, G, "m1", "c")
    b, _ = opened(cache, G, "m2", "c")
    a.add([("t", 0), ("t", 1)])
    b.add([("t", 1), ("u", 0), ("u", 1)])
    assert cache.partition_count() == 5
    b.forget([("u", 0)])
    assert cache.partition_count() == 4
    cache.close(G, "m1")
    assert cache.partition_count() == 2


def test_a_session_remembers_its_partitions_across_requests():
    cache = ShareSessionCache(10)
    session, _ = opened(cache, G, "m1", "c")
    session.add([("t", 0)])
    cache.advance(session)
    found, error = cache.check(G, "m1", 2)
    assert error == ErrorCode.none and list(found.partitions) == [("t", 0)]



def test_a_disconnect_removes_only_that_connections_sessions_through_the_index():
    """Kafka's ShareSessionCache maps a connection to its session (connectionIdToSessionMap) so
    that a disconnect does not scan the cache; replaced and closed sessions leave the index."""
    cache = ShareSessionCache(10)
    opened(cache, G, "m1", "c1")
    opened(cache, G, "m2", "c1")
    opened(cache, G, "m3", "c2")
    moved, _ = opened(cache, "other", "m1", "c2")
    cache.close(G, "m2")  # closed at its final epoch: no longer the connection's
    again, replaced = opened(cache, "other", "m1", "c1")  # the member reopened on another connection
    assert replaced is moved and not cache.is_live(moved) and cache.is_live(again)
    gone = cache.remove_connection("c1")
    assert sorted(s.key for s in gone) == [(G, "m1"), ("other", "m1")]
    assert cache.evictions == 2 and sorted(cache.sessions) == [(G, "m3")]
    assert cache.remove_connection("c1") == []  # a second sweep finds nothing
    assert [s.key for s in cache.remove_connection("c2")] == [(G, "m3")]
    assert len(cache) == 0 and cache._by_connection == {}
