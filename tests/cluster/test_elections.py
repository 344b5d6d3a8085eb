"""The controller's election rules (laketail.cluster.controller: elect_leader,
broker_died, broker_alive), as pure functions of a registration, the live brokers and
the unclean setting.

The state machine at the bottom drives one partition through random deaths, returns
and controller ticks the way :class:`~laketail.cluster.controller.Controller`
calls the rules, and checks Kafka's invariants after every step.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from laketail.cluster.controller import broker_alive, broker_died, elect_leader
from laketail.cluster.metadata import NO_LEADER, PartitionRegistration


def reg(replicas, leader, isr, leader_epoch=5, partition_epoch=9) -> PartitionRegistration:
    return PartitionRegistration("t", 0, list(replicas), leader, leader_epoch, list(isr), partition_epoch)


def epochs(r: PartitionRegistration) -> tuple[int, int]:
    return r.leader_epoch, r.partition_epoch


# -- elect_leader -------------------------------------------------------------------------------


def test_the_first_live_isr_member_in_replica_order_leads():
    # ISR listed out of replica order: replica order decides, not ISR order.
    r = reg([1, 2, 3, 4], 1, [1, 4, 3])
    assert elect_leader(r, live={3, 4}, unclean=False, exclude=1)
    assert r.leader == 3
    assert r.isr == [4, 3]
    assert epochs(r) == (6, 10)


def test_a_dead_leader_leaves_the_isr():
    r = reg([1, 2, 3], 1, [1, 2, 3])
    assert elect_leader(r, live={2, 3}, unclean=False, exclude=1)
    assert (r.leader, r.isr) == (2, [2, 3])


def test_a_dead_leader_that_is_the_last_isr_member_stays_in_it_and_the_partition_goes_offline():
    r = reg([1, 2, 3], 1, [1])
    assert elect_leader(r, live={2, 3}, unclean=False, exclude=1)
    assert r.leader == NO_LEADER
    assert r.isr == [1]
    assert epochs(r) == (6, 10)


def test_no_live_isr_member_means_offline_even_with_a_live_out_of_sync_replica():
    r = reg([1, 2, 3], 1, [1, 2])
    assert elect_leader(r, live={3}, unclean=False, exclude=1)
    assert r.leader == NO_LEADER
    assert 3 not in r.isr
    assert r.isr  # never emptied


def test_unclean_election_lets_the_first_live_replica_lead_alone():
    r = reg([1, 2, 3, 4], 1, [1, 2])
    assert elect_leader(r, live={4, 3}, unclean=True, exclude=1)
    assert (r.leader, r.isr) == (3, [3])
    assert epochs(r) == (6, 10)


def test_unclean_election_prefers_a_live_isr_member():
    r = reg([1, 2, 3], 1, [1, 3])
    assert elect_leader(r, live={2, 3}, unclean=True, exclude=1)
    assert (r.leader, r.isr) == (3, [3])


def test_unclean_election_with_no_live_replica_leaves_the_partition_offline():
    r = reg([1, 2], 1, [1])
    assert elect_leader(r, live={7}, unclean=True, exclude=1)
    assert (r.leader, r.isr) == (NO_LEADER, [1])


@pytest.mark.parametrize("unclean", [False, True])
def test_an_election_that_changes_nothing_bumps_no_epoch(unclean):
    offline = reg([1, 2], NO_LEADER, [1])
    assert not elect_leader(offline, live=set(), unclean=unclean)
    assert epochs(offline) == (5, 9)
    led = reg([1, 2], 1, [1, 2])
    assert not elect_leader(led, live={1, 2}, unclean=unclean)
    assert epochs(led) == (5, 9)


# -- broker_died ----------------------------------------------------------------------------------


def test_a_dead_follower_leaves_the_isr_and_only_the_partition_epoch_moves():
    r = reg([1, 2, 3], 1, [1, 2, 3])
    assert broker_died(r, 2, live={1, 3}, unclean=False)
    assert (r.leader, r.isr) == (1, [1, 3])
    assert epochs(r) == (5, 10)


def test_a_dead_follower_out_of_the_isr_changes_nothing():
    r = reg([1, 2, 3], 1, [1, 3])
    assert not broker_died(r, 2, live={1, 3}, unclean=False)
    assert epochs(r) == (5, 9)


def test_a_broker_without_a_replica_changes_nothing():
    r = reg([1, 2], 1, [1, 2])
    assert not broker_died(r, 3, live={1, 2}, unclean=True)
    assert (r.leader, r.isr, epochs(r)) == (1, [1, 2], (5, 9))


def test_the_last_isr_member_of_an_offline_partition_stays_when_it_dies_again():
    r = reg([1, 2], NO_LEADER, [1])
    assert not broker_died(r, 1, live={2}, unclean=False)
    assert (r.leader, r.isr, epochs(r)) == (NO_LEADER, [1], (5, 9))


def test_a_dead_leader_is_replaced_by_the_next_isr_member():
    r = reg([1, 2, 3], 1, [1, 2, 3])
    assert broker_died(r, 1, live={2, 3}, unclean=False)
    assert (r.leader, r.isr, epochs(r)) == (2, [2, 3], (6, 10))


def test_a_dead_leader_is_not_its_own_successor_even_if_the_caller_still_counts_it_alive():
    r = reg([1, 2], 1, [1, 2])
    assert broker_died(r, 1, live={1, 2}, unclean=False)
    assert (r.leader, r.isr) == (2, [2])


# -- broker_alive ---------------------------------------------------------------------------------


def test_an_offline_partition_comes_back_when_its_isr_member_returns():
    r = reg([1, 2, 3], NO_LEADER, [2])
    assert broker_alive(r, 2, live={2, 3})
    assert (r.leader, r.isr, epochs(r)) == (2, [2], (6, 10))


def test_an_out_of_sync_replica_returning_does_not_bring_an_offline_partition_back():
    r = reg([1, 2, 3], NO_LEADER, [1])
    assert not broker_alive(r, 3, live={3})
    assert (r.leader, r.isr, epochs(r)) == (NO_LEADER, [1], (5, 9))


def test_a_returning_broker_does_not_take_over_an_online_partition():
    r = reg([1, 2], 2, [2])
    assert not broker_alive(r, 1, live={1, 2})
    assert (r.leader, r.isr, epochs(r)) == (2, [2], (5, 9))


def test_the_returning_leader_keeps_only_the_live_isr_members():
    r = reg([1, 2, 3], NO_LEADER, [1, 2, 3])
    assert broker_alive(r, 3, live={3, 1})
    assert (r.leader, r.isr) == (3, [1, 3])


# -- random histories ---------------------------------------------------------------------------------

BROKERS = [0, 1, 2, 3]


class ElectionMachine(RuleBasedStateMachine):
    """One partition under the controller's calls: deaths noticed one at a time (a
    tick) or several at once (a new controller's presumed-dead set, which may name a
    broker already dead), returns, and the tick's election of partitions without a live
    leader."""

    @initialize(
        replicas=st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True),
        unclean=st.booleans(),
    )
    def create(self, replicas, unclean):
        self.unclean = unclean
        self.live = set(BROKERS)
        self.reg = PartitionRegistration("t", 0, replicas, replicas[0], 0, list(replicas))
        self.before = None

    def _remember(self):
        r = self.reg
        self.before = (r.leader, list(r.isr), r.leader_epoch, r.partition_epoch)

    def _check_step(self, changed: bool):
        leader, isr, leader_epoch, partition_epoch = self.before
        r = self.reg
        moved = (r.leader, r.isr) != (leader, isr)
        assert changed == moved
        assert r.partition_epoch == partition_epoch + (1 if moved else 0)
        assert r.leader_epoch == leader_epoch + (1 if r.leader != leader else 0)
        if r.leader not in (leader, NO_LEADER):
            assert r.leader in self.live
            if not self.unclean:
                assert r.leader in isr, f"broker {r.leader} was elected from outside the ISR {isr}"
            elif r.leader not in isr:
                assert r.isr == [r.leader]
                assert not set(isr) & self.live, "unclean election while an ISR member was alive"

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def one_dies(self, data):
        broker = data.draw(st.sampled_from(sorted(self.live)))
        self._remember()
        self.live.discard(broker)
        self._check_step(broker_died(self.reg, broker, set(self.live), self.unclean))

    @precondition(lambda self: len(self.live) >= 2)
    @rule(data=st.data())
    def several_die_at_once(self, data):
        dead = data.draw(st.sets(st.sampled_from(sorted(self.live)), min_size=2))
        self.live -= dead
        for broker in sorted(dead):
            self._remember()
            self._check_step(broker_died(self.reg, broker, set(self.live), self.unclean))

    @precondition(lambda self: set(BROKERS) - self.live)
    @rule(data=st.data())
    def a_dead_one_is_declared_dead_again(self, data):
        # A new controller's presumed-dead set may name brokers already recorded dead.
        broker = data.draw(st.sampled_from(sorted(set(BROKERS) - self.live)))
        self._remember()
        self._check_step(broker_died(self.reg, broker, set(self.live), self.unclean))

    @precondition(lambda self: set(BROKERS) - self.live)
    @rule(data=st.data())
    def one_returns(self, data):
        broker = data.draw(st.sampled_from(sorted(set(BROKERS) - self.live)))
        self.live.add(broker)
        self._remember()
        self._check_step(broker_alive(self.reg, broker, set(self.live)))

    @rule()
    def tick(self):
        r = self.reg
        if r.leader == NO_LEADER or r.leader not in self.live:
            self._remember()
            self._check_step(elect_leader(r, set(self.live), self.unclean, exclude=r.leader))

    @invariant()
    def leader_in_isr_and_isr_never_empty(self):
        r = self.reg
        assert r.isr, r
        assert set(r.isr) <= set(r.replicas), r
        assert len(set(r.isr)) == len(r.isr), r
        if r.online:
            assert r.leader in r.isr, r
            assert r.leader in self.live, r

    @invariant()
    def isr_members_only_leave_for_a_reason(self):
        # With unclean=False the ISR only loses dead brokers, so a live ISR member keeps
        # the partition online.
        r = self.reg
        if not self.unclean and set(r.isr) & self.live and not r.online:
            pytest.fail(f"offline with live ISR member(s) {set(r.isr) & self.live}: {r}")


ElectionMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=25, deadline=None)
test_random_histories_keep_the_election_invariants = ElectionMachine.TestCase
