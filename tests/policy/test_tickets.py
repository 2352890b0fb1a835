"""Session tickets (seed 002): mint from a live stream, verify in constant time, die with the stream."""

from __future__ import annotations

import asyncio
import base64
import hmac

import pytest

from neuralis_jupyter.contracts import (
    SKILL_USER_ID,
    SYSTEM_USER_ID,
    SentinelIdentityError,
    create_system_session,
)
from neuralis_jupyter.contracts.identity import IDENTITY_FIELDS
from neuralis_jupyter.store import Store
from neuralis_jupyter.store.sql import dispose_engines
from neuralis_jupyter.store.tickets import SkillIdentityError, TicketError, TicketMintRefused

from .helpers import session

STREAM = "r-0123456789abcdef"


@pytest.fixture
def live(store):
    who = session(request_id=STREAM, conversation_id="c-1", delegate_run_id=None)
    store.tickets.open_stream(who)
    return who


def secret_of(ticket: str) -> str:
    return ticket.split(".")[2]


def test_mint_and_verify_rebuild_the_original_session(store, live):
    ticket = store.tickets.mint(live)
    prefix, request_id, secret = ticket.split(".")
    assert (prefix, request_id) == ("nrs1", STREAM)
    assert len(base64.urlsafe_b64decode(secret + "=")) == 32
    assert "=" not in secret
    assert store.tickets.verify(ticket) == live
    assert store.tickets.mint(live) != ticket  # a fresh secret each time


def test_another_process_verifies_from_the_store(tmp_path):
    store = Store.open(tmp_path / "home")
    who = session(request_id=STREAM)
    store.tickets.open_stream(who)
    ticket = store.tickets.mint(who)
    dispose_engines()
    assert Store.open(tmp_path / "home").tickets.verify(ticket) == who


@pytest.mark.parametrize("field", IDENTITY_FIELDS)
def test_mint_refuses_a_sentinel_in_any_identity_field(store, field):
    with pytest.raises(SentinelIdentityError):
        store.tickets.mint(session(**{"request_id": STREAM, field: SYSTEM_USER_ID}))


@pytest.mark.parametrize("field", ["user_id", "agent_id"])
def test_mint_refuses_the_skill_principal_with_its_own_error(store, live, field):
    with pytest.raises(SkillIdentityError, match="__skill__") as info:
        store.tickets.mint(live.replace(**{field: SKILL_USER_ID}))
    assert info.value.field_name == field
    assert not isinstance(info.value, SentinelIdentityError)


def test_mint_refusals_without_a_live_stream(store, live):
    with pytest.raises(TicketMintRefused, match="not live"):
        store.tickets.mint(session(request_id="r-other"))
    with pytest.raises(TicketMintRefused, match="cannot name a stream"):
        store.tickets.mint(session(request_id=None))
    with pytest.raises(TicketMintRefused, match="cannot name a stream"):
        store.tickets.mint(session(request_id="r.dotted"))
    with pytest.raises(TicketMintRefused, match="another user"):
        store.tickets.mint(live.replace(user_id="mallory"))
    with pytest.raises(TicketMintRefused, match="system envelope"):
        store.tickets.mint(create_system_session("bootstrap", "agent-core", live))
    store.tickets.end_stream(STREAM)
    with pytest.raises(TicketMintRefused, match="not live"):
        store.tickets.mint(live)


def test_open_stream_is_idempotent_but_not_reusable(store, live):
    store.tickets.open_stream(live)  # the same session again: fine
    with pytest.raises(TicketMintRefused, match="already opened"):
        store.tickets.open_stream(live.replace(user_id="bob"))
    store.tickets.end_stream(STREAM)
    with pytest.raises(TicketMintRefused, match="has ended"):
        store.tickets.open_stream(live)


def test_a_forged_secret_and_a_wrong_request_id_are_refused(store, live):
    ticket = store.tickets.mint(live)
    forged = f"nrs1.{STREAM}.{base64.urlsafe_b64encode(bytes(32)).rstrip(b'=').decode()}"
    with pytest.raises(TicketError, match=r"^invalid or expired ticket"):
        store.tickets.verify(forged)
    other = session(request_id="r-other")
    store.tickets.open_stream(other)
    store.tickets.mint(other)
    with pytest.raises(TicketError):  # a real secret presented for another live stream
        store.tickets.verify(f"nrs1.r-other.{secret_of(ticket)}")
    with pytest.raises(TicketError):
        store.tickets.verify(f"nrs1.r-unknown.{secret_of(ticket)}")


GOOD_SECRET = base64.urlsafe_b64encode(b"\x01" * 32).rstrip(b"=").decode()
MALFORMED = [
    "",
    "nrs1",
    "nrs1.",
    "nrs1..",
    f"nrs2.{STREAM}.{GOOD_SECRET}",
    f"NRS1.{STREAM}.{GOOD_SECRET}",
    f"{STREAM}.{GOOD_SECRET}",
    f"nrs1.{STREAM}",
    f"nrs1.{STREAM}.{GOOD_SECRET}.extra",
    f"nrs1.{STREAM}.{GOOD_SECRET}.",
    f".nrs1.{STREAM}.{GOOD_SECRET}",
    f"nrs1.{STREAM}.{GOOD_SECRET}=",
    f"nrs1.{STREAM}.{GOOD_SECRET[:-1]}*",
    f"nrs1.{STREAM}.{GOOD_SECRET[:-1]}",
    f"nrs1.{STREAM}.{GOOD_SECRET}A",
    f"nrs1.{STREAM}.{GOOD_SECRET[:-1]}F",  # non-canonical: the unused trailing bits are set
    f"nrs1.{STREAM}.{base64.urlsafe_b64encode(b'x' * 16).rstrip(b'=').decode()}",
    f"nrs1.{STREAM}.{base64.urlsafe_b64encode(b'x' * 64).rstrip(b'=').decode()}",
    f"nrs1.r/../x.{GOOD_SECRET}",
    f"nrs1. {STREAM}.{GOOD_SECRET}",
    f"nrs1.{'r' * 129}.{GOOD_SECRET}",
]


@pytest.mark.parametrize("ticket", MALFORMED)
def test_malformed_tickets_are_refused_with_the_same_message(store, live, ticket):
    with pytest.raises(TicketError) as info:
        store.tickets.verify(ticket)
    assert str(info.value).startswith("invalid or expired ticket")
    assert info.value.code == "ticket_invalid"


def test_non_strings_are_refused(store):
    with pytest.raises(TicketError):
        store.tickets.verify(None)  # type: ignore[arg-type]


def test_every_ticket_dies_with_its_stream(store, live):
    tickets = [store.tickets.mint(live) for _ in range(3)]
    assert all(store.tickets.verify(t) == live for t in tickets)
    store.tickets.end_stream(STREAM)
    for ticket in tickets:
        with pytest.raises(TicketError):
            store.tickets.verify(ticket)
    store.tickets.end_stream(STREAM)  # idempotent


def test_stale_streams_can_be_swept(store, live):
    from datetime import UTC, datetime, timedelta

    ticket = store.tickets.mint(live)
    assert store.tickets.end_streams_before(datetime.now(UTC) - timedelta(hours=1)) == 0
    assert store.tickets.verify(ticket) == live
    assert store.tickets.end_streams_before(datetime.now(UTC) + timedelta(seconds=1)) == 1
    with pytest.raises(TicketError):
        store.tickets.verify(ticket)


def test_parallel_verification_within_a_live_stream(store, live):
    tickets = [store.tickets.mint(live) for _ in range(3)]

    async def verify_all() -> list[object]:
        return await asyncio.gather(*(asyncio.to_thread(store.tickets.verify, t) for t in tickets * 4))

    assert asyncio.run(verify_all()) == [live] * 12


def test_verification_uses_compare_digest_over_every_stored_hash(store, live, monkeypatch):
    tickets = [store.tickets.mint(live) for _ in range(4)]
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    store.tickets.verify(tickets[0])  # matches the FIRST stored hash; no early exit
    assert len(seen) == 4
    assert len({b for _, b in seen}) == 4
    seen.clear()
    with pytest.raises(TicketError):
        store.tickets.verify(f"nrs1.r-unknown.{secret_of(tickets[0])}")
    assert len(seen) == 1  # an unknown stream still costs a comparison


def test_the_refusal_detail_is_logged_at_debug_only(store, live, caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="neuralis_jupyter.store.tickets")
    ticket = store.tickets.mint(live)
    store.tickets.end_stream(STREAM)
    with pytest.raises(TicketError) as info:
        store.tickets.verify(ticket)
    assert "ended" not in str(info.value)
    assert "stream ended" in caplog.text
