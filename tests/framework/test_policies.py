"""The framework's pure decisions (framework/policies.py): every (error policy, attempt) pair and
the settlement of messages a job left unsettled; and the in-memory testing helper that applies
them as a worker does (framework/testing.py)."""

from __future__ import annotations

import itertools

import pytest

from quafka.framework import Backoff, BackoffExceedsLockDuration, Consumer, RouteConfigError
from quafka.framework.policies import Verdict, VerdictKind, decide, on_failure, unsettled
from quafka.framework.testing import consume, message

BACKOFF = Backoff(initial_ms=100, multiplier=2.0, max_ms=500)


@pytest.mark.parametrize(("attempt", "expected_ms"), [(1, 100), (2, 200), (3, 400), (4, 500), (9, 500)])
def test_backoff_doubles_up_to_its_maximum(attempt, expected_ms):
    assert BACKOFF.delay_ms(attempt) == expected_ms


@pytest.mark.parametrize("bad", [dict(initial_ms=-1), dict(initial_ms=10, max_ms=5), dict(multiplier=0.5)])
def test_backoff_refuses_impossible_values(bad):
    with pytest.raises(ValueError, match="Backoff needs"):
        Backoff(**bad)


CASES = list(itertools.product(("retry", "reject", "release"), (1, 2, 3), (None, BACKOFF, Backoff(0, 1.0, 0))))


@pytest.mark.parametrize(("on_error", "attempt", "backoff"), CASES)
def test_on_failure_for_every_policy_and_attempt(on_error, attempt, backoff):
    verdict = on_failure(on_error, attempt, 3, backoff)
    if on_error == "reject":  # the code's choice, at any attempt
        assert verdict == Verdict(VerdictKind.REJECT) and not verdict.exhausted
    elif attempt >= 3:  # the last attempt failed: given up (dead-lettered with reason max-attempts)
        assert verdict == Verdict(VerdictKind.REJECT, 0, True) and verdict.exhausted
    elif on_error == "release" or backoff is None or backoff.max_ms == 0:
        assert verdict == Verdict(VerdictKind.RELEASE)
    else:
        assert verdict == Verdict(VerdictKind.BACKOFF, backoff.delay_ms(attempt))


def test_unsettled_by_ack_mode():
    assert unsettled("auto").kind is VerdictKind.ACCEPT and unsettled("manual").kind is VerdictKind.RELEASE


def test_decide_keeps_what_the_consumer_settled():
    a, b, c = message(b"a", offset=1), message(b"b", offset=2, delivery_attempt=2), message(b"c", offset=3)
    settings = {"on_error": "retry", "max_attempts": 5, "backoff": BACKOFF, "ack_mode": "auto"}
    settled = {a.coordinates: Verdict(VerdictKind.REJECT)}
    assert [v.kind for _, v in decide([a, b, c], settled, False, settings)] == [
        VerdictKind.REJECT, VerdictKind.ACCEPT, VerdictKind.ACCEPT]
    assert [v for _, v in decide([a, b, c], settled, True, settings)] == [
        Verdict(VerdictKind.REJECT), Verdict(VerdictKind.BACKOFF, 200), Verdict(VerdictKind.BACKOFF, 100)]


# ----------------------------------------------------------------------------- the in-memory helper

class Jobs(Consumer):
    def consume_one(self, message):
        if message.value == b"poison":
            self.reject(message)
        elif message.value == b"later":
            self.pause(message, 2000)
        elif message.value == b"long":
            self.renew(message)
        elif message.value == b"flaky":
            raise RuntimeError("flaky")


def test_consume_one_in_memory_settles_as_a_worker_would():
    outcome = consume(Jobs, [message(b"ok"), message(b"poison"), message(b"later"), message(b"long"),
                             message(b"flaky"), message(b"flaky", delivery_attempt=3)],
                      max_attempts=3, backoff=BACKOFF, dead_letter_topic="dlq.jobs")
    assert outcome.accepted == [b"ok", b"long"]
    assert outcome.rejected == [b"poison", b"flaky"] == outcome.dead_lettered
    assert outcome.backoffs == [(b"later", 2000), (b"flaky", 100)]
    assert [m.value for m in outcome.renewed] == [b"long"]
    assert [str(e) for _, e in outcome.errors] == ["flaky", "flaky"]


def test_pause_beyond_the_lock_raises_the_seeds_error():
    class Patient(Consumer):
        def consume_one(self, message):
            self.pause(message, 9_500)

    outcome = consume(Patient, [message(b"x")], lock_duration_ms=10_000, backoff=Backoff(100, 2.0, 1000))
    [(_, error)] = outcome.errors  # raised inside the job: the route's error policy handles the message
    assert isinstance(error, BackoffExceedsLockDuration)
    assert str(error) == "route 'test/Patient': pause: backoff 9500 ms exceeds max 9000 ms (lock: 10000 ms, buffer: 1000 ms)"
    assert outcome.backoffs == [(b"x", 100)]


def test_batch_consumer_with_manual_acknowledgement():
    class Batch(Consumer):
        def consume(self, messages):
            self.accept(messages[0])

    outcome = consume(Batch, [message(b"a"), message(b"b")], ack_mode="manual")
    assert outcome.accepted == [b"a"] and outcome.released == [b"b"]


def test_async_consumer_in_memory():
    class Async(Consumer):
        async def consume_one(self, message):
            if message.value == b"no":
                self.reject(message)

    outcome = consume(Async, [message(b"yes"), message(b"no")])
    assert outcome.accepted == [b"yes"] and outcome.rejected == [b"no"]


def test_consumer_group_methods_in_memory():
    class Orders(Consumer):
        def consume_one(self, message):
            if message.value == b"skip":
                self.mark_as_consumed(message)
            else:
                self.seek(message)

    outcome = consume(Orders, [message(b"skip", offset=10), message(b"again", offset=11)], group_type="consumer",
                      ack_mode="manual")
    assert outcome.accepted == [b"skip"] and outcome.seeks == [("test", 0, 11)]


def test_methods_of_the_other_group_type_do_not_exist():
    class Wrong(Consumer):
        def consume_one(self, message):
            self.accept(message)

    outcome = consume(Wrong, [message(b"x")], group_type="consumer", on_error="reject")
    [(_, error)] = outcome.errors  # a failure like any other: the error policy rejects the message
    assert isinstance(error, AttributeError) and outcome.rejected == [b"x"]
    assert str(error) == ("accept() applies to share-group routes; Wrong runs on a consumer-group route "
                          "(use mark_as_consumed, seek, pause)")


def test_settings_are_validated_in_memory_too():
    with pytest.raises(RouteConfigError, match="max_attempts: 9 exceeds delivery_count_limit 5"):
        consume(Jobs, [], max_attempts=9)
