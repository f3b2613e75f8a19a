"""The in-memory budget of invalid API keys per client address stays bounded however many
addresses a client sprays from, and forgets the right ones first."""

from __future__ import annotations

from gateway.api import auth
from gateway.api.auth import AuthState

RATE, BURST = 1.0, 3


def _spend(state: AuthState, address: str, now: float) -> None:
    for _ in range(BURST):
        assert state.failure_wait(address, RATE, BURST, now) == 0.0
        state.record_failure(address, RATE, BURST, now)
    assert state.failure_wait(address, RATE, BURST, now) == 1.0  # a whole token at 1 per second


def test_an_address_spends_its_budget_and_gets_it_back_over_time() -> None:
    state = AuthState()
    _spend(state, "192.0.2.9", now=10.0)
    assert state.failure_wait("192.0.2.9", RATE, BURST, now=10.5) == 0.5
    assert state.failure_wait("192.0.2.9", RATE, BURST, now=11.0) == 0.0
    assert state.failure_wait("198.51.100.1", RATE, BURST, now=10.0) == 0.0  # others untouched


def test_the_address_map_forgets_whole_budgets_first() -> None:
    state = AuthState()
    cap = auth._FAILURE_ADDRESSES_MAX
    for i in range(cap - 1):
        state.record_failure(f"10.0.{i // 256}.{i % 256}", RATE, BURST, now=0.0)  # one spent each
    _spend(state, "192.0.2.1", now=1_000.0)  # spent now: must be kept
    assert len(state.failures) == cap
    state.record_failure("192.0.2.2", RATE, BURST, now=1_000.0)  # the others have refilled by now
    assert set(state.failures) == {"192.0.2.1", "192.0.2.2"}
    assert state.failure_wait("192.0.2.1", RATE, BURST, now=1_000.0) > 0.0  # still limited


def test_the_address_map_starts_over_when_every_budget_is_in_use() -> None:
    state = AuthState()
    cap = auth._FAILURE_ADDRESSES_MAX
    for i in range(cap):
        state.record_failure(f"10.1.{i // 256}.{i % 256}", RATE, BURST, now=0.0)
    state.record_failure("192.0.2.3", RATE, BURST, now=0.5)  # nobody's budget is whole yet
    assert set(state.failures) == {"192.0.2.3"}
