"""The shared store: PostgreSQL through an asyncpg pool, for several gateway instances on one database.

It keeps SqliteStore's semantics exactly (the conformance suite runs on both); what changes is how
many writers there are. SQLite has one writer at a time; here every instance writes at once, so:

- Claims are `UPDATE ... WHERE id IN (SELECT ... FOR NO KEY UPDATE SKIP LOCKED LIMIT n) RETURNING ...`:
  one round trip, and concurrent claimers take disjoint rows without waiting on each other.
- Every later write is a compare-and-set in its WHERE clause (status, lease owner), re-checked by
  PostgreSQL on the newest row version when a concurrent writer got there first; rowcounts decide.
- No cycle of lock waits: a writer holding a job and its deliveries always took the job first; rows of
  one table locked together are taken in id order (or with SKIP LOCKED, which never waits); queue
  counters are updated at commit, last (see the migration).
- Statements that must see rows committed while they waited for a lock (cancelling a job's pending
  webhooks) run as a separate statement after the lock is held, not as a CTE of the same snapshot.
- Work made due for other instances is announced with NOTIFY in the same transaction (`on_work`).

Round trips: create_job, the claims, transition (with the webhooks it creates), submit_response and
record_attempt (with the job's change) are one statement each; cancels and sweeps, which need a
second statement for the reason above, are short transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg

from gateway import ids
from gateway.jobs import (
    NON_TERMINAL,
    RUNNABLE,
    TERMINAL,
    DeliveryState,
    JobStatus,
    WebhookEvent,
    check_path,
)
from gateway.store.base import (
    Attempt,
    CasResult,
    Delivery,
    DeliverySummary,
    FilterOutcome,
    Job,
    JobChanges,
    NewDelivery,
    NewJob,
    PolicyRecord,
    QueueStat,
    QueueStats,
    StoreError,
    expiry_changes,
)
from gateway.store.rows import (
    JOB_COLUMN_COUNT,
    QUEUES,
    STOPS_DELIVERY,
    from_json,
    initial_state,
    row_to_attempt,
    row_to_delivery,
    row_to_job,
    to_json,
)
from gateway.store.sqlfile import load_migrations, load_queries

T = TypeVar("T")

log = logging.getLogger("gateway.store.postgres")

_Q = load_queries("gateway.store", "postgres_queries.sql")
_JOB_COLS = " ".join(_Q["job_columns"].split())
_J_JOB_COLS = ", ".join("j." + c.strip() for c in _JOB_COLS.split(","))
_SUMMARY_COLS = " ".join(_Q["summary_columns"].split())
_SUMMARY_JOIN = _Q["summary_join"]  # it holds -- comments: keep its newlines
_FRAGMENTS = {
    "{job_columns}": _JOB_COLS,
    "{j_job_columns}": _J_JOB_COLS,
    "{summary_columns}": _SUMMARY_COLS,
    "{summary_join}": _SUMMARY_JOIN,
}


def _expand(sql: str) -> str:
    for key, value in _FRAGMENTS.items():
        sql = sql.replace(key, value)
    return sql


Q = {name: _expand(sql) for name, sql in _Q.items()}

# A cancelled or expired job's webhooks stop; a blocked or finished job's notices run their course.
_DEFAULT_CHANNEL = "gateway_work"
_MAX_IDENT = 63  # NAMEDATALEN - 1: the longest channel name or application_name PostgreSQL keeps

# SQLSTATEs that mean "the database cannot do the work now" (the API answers 503), as opposed to a
# bug (a constraint violation, bad SQL) that must surface as itself.
# connection, authorisation, missing database, resources, operator intervention, system error
_UNAVAILABLE_CLASSES = frozenset({"08", "28", "3D", "53", "57", "58"})
_UNAVAILABLE_STATES = frozenset({"25006", "55P03", "40001", "40P01"})  # read-only, lock timeout, rollbacks
_RETRY_STATES = frozenset({"40001", "40P01"})  # the transaction was rolled back whole: safe to run again
_ATTEMPTS = 3
# Columns of a new delivery, as they are unnested from one array parameter each.
_DELIVERY_COLUMNS = (
    ("id", "text"),
    ("event", "text"),
    ("url", "text"),
    ("body", "bytea"),
    ("deadline", "float8"),
    ("due_at", "float8"),
    ("lease_owner", "text"),
)
# SQLite's INSERT OR REPLACE into delivery_attempts: the same (delivery, attempt) logged again wins
_ATTEMPT_UPSERT = ", ".join(
    f"{c} = excluded.{c}"
    for c in (
        "job_id",
        "event",
        "started_at",
        "duration_ms",
        "status_code",
        "error",
        "response_excerpt",
        "next_attempt_at",
    )
)


def _sqlstate(exc: BaseException) -> str:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else ""


def _unavailable(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.InternalClientError):
        return True  # what asyncpg raises when the server ended an idle pooled connection under it
    if isinstance(exc, asyncpg.PostgresError):
        state = _sqlstate(exc)
        return state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_STATES
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed", "pool is closing"; DataError and ClientConfigurationError (both
        # ValueErrors) are bad arguments or settings, not outages
        return not isinstance(exc, ValueError)
    return isinstance(exc, OSError | TimeoutError)


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.InternalClientError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        return _sqlstate(exc).startswith("08")
    if isinstance(exc, asyncpg.InterfaceError):
        return not isinstance(exc, ValueError)
    return isinstance(exc, OSError)


def _storable(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL. The API refuses it in what users send, but a receiver's
    response excerpt or error is whatever it answered: keep the rest of it rather than lose the attempt."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\ufffd")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _channel_for(schema: str | None) -> str:
    """One NOTIFY channel per schema, so deployments (and tests) sharing a database do not wake each other."""
    if schema is None:
        return _DEFAULT_CHANNEL
    channel = f"{_DEFAULT_CHANNEL}:{schema}"
    if len(channel.encode()) > _MAX_IDENT:
        channel = f"{_DEFAULT_CHANNEL}:{hashlib.sha256(schema.encode()).hexdigest()[:32]}"
    return channel


def _lock_key(schema: str | None) -> int:
    """The advisory lock that serialises migrations of one schema (a signed 64-bit key)."""
    digest = hashlib.sha256(f"gateway.store.migrate:{schema or ''}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _row_to_job_with_summary(r: Any) -> Job:
    """A row of job columns followed by summary_columns (see summary_join)."""
    summary = None
    if r[9] is not None:  # webhook_url: only jobs with a webhook have a `delivery` object
        n = JOB_COLUMN_COUNT
        summary = DeliverySummary(
            attempts=int(r[n] or 0),
            last_attempt_at=r[n + 1],
            last_status_code=r[n + 2],
            next_attempt_at=r[n + 3],
            last_error=r[n + 4],
        )
    return row_to_job(r, summary)


def _termination_event(conn: Any) -> asyncio.Event:
    """An event set when asyncpg sees `conn` close (the server ended it, or the socket broke)."""
    lost = asyncio.Event()
    conn.add_termination_listener(lambda _c: lost.set())
    return lost


def _unnest(a: _Args, columns: Sequence[tuple[str, str]], rows: Sequence[tuple[Any, ...]], alias: str) -> str:
    """`unnest($1::text[], ...) AS alias(col, ...)`: many rows as one parameter per column."""
    arrays = ", ".join(a([row[i] for row in rows], f"{t}[]") for i, (_, t) in enumerate(columns))
    return f"unnest({arrays}) AS {alias}({', '.join(c for c, _ in columns)})"


def _rowcount(status: str) -> int:
    """The row count in a command tag such as 'UPDATE 3' or 'DELETE 0'."""
    return int(status.rsplit(" ", 1)[-1])


class _Args:
    """Positional parameters of a statement assembled from parts: each call adds one, returns `$n`.

    Every reference carries a cast, so asyncpg prepares the same parameter types whatever the values
    (a None is then still typed)."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any, cast: str) -> str:
        self.values.append(value)
        return f"${len(self.values)}::{cast}"


async def _keep_session(_conn: Any) -> None:
    """The pool's reset on release, after asyncpg's own (which rolls back a transaction left open).

    asyncpg's default also runs `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`:
    a round trip per operation (a sixth of the store's time under load, and PostgreSQL parsing four
    statements). This store leaves nothing for it to undo on a pooled connection: it sets no session
    settings (search_path and application_name are the connection's own, from its start-up), takes
    only transaction-scoped advisory locks, opens no cursor outside a transaction and LISTENs on a
    connection of its own."""


class PostgresStore:
    def __init__(
        self,
        url: str,
        *,
        min_size: int = 2,
        max_size: int = 10,
        schema: str | None = None,
        command_timeout: float = 30.0,
        listen_keepalive: float = 15.0,
        reconnect_backoff: tuple[float, float] = (0.1, 5.0),
        application_name: str = "gateway",
    ) -> None:
        """`schema` puts every table in that schema (created if missing) via the connections'
        search_path: several deployments, or one per test, can share a database. `listen_keepalive`
        is how often the LISTEN connection is probed, to find a connection that died silently;
        `reconnect_backoff` the first and the longest wait between attempts to re-establish it.
        `application_name` names the connections in pg_stat_activity (the LISTEN one gets
        a "-listener" suffix)."""
        self.url = url
        self.schema = schema
        self.channel = _channel_for(schema)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._keepalive = listen_keepalive
        self._backoff = reconnect_backoff
        self.application_name = application_name
        settings = {"application_name": application_name}
        if schema is not None:
            settings["search_path"] = _quote_ident(schema)
        self._server_settings = settings
        self._pool: Any = None
        self._callbacks: list[Callable[[str], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._listen_conn: Any = None
        self._closing = False

    # ---- plumbing -------------------------------------------------------------------------

    async def open(self) -> None:
        self._closing = False
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=self._min_size,
                max_size=self._max_size,
                command_timeout=self._command_timeout,
                server_settings=self._server_settings,
                reset=_keep_session,
            )
        except Exception as exc:
            if _unavailable(exc):
                raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
            raise
        try:
            await self._run(self._migrate)
        except BaseException:
            await self._pool.close()
            self._pool = None
            raise
        if self._callbacks:
            self._start_listener()

    async def _migrate(self, conn: Any) -> None:
        """Apply the numbered migrations not yet recorded, once, however many instances start at once:
        the advisory lock makes the others wait, then find every version already applied."""
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(self.schema))
            if self.schema is not None:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(self.schema)}")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for mig in load_migrations("gateway.store", "postgres"):
                if mig.version in done:
                    continue
                await conn.execute(mig.sql)  # no arguments: the simple protocol runs the whole script
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", mig.version, mig.name
                )
                log.info("applied PostgreSQL migration %04d_%s", mig.version, mig.name)

    async def close(self) -> None:
        self._closing = True
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=10.0)
            except TimeoutError:
                pool.terminate()

    async def ping(self) -> None:
        await self._run(lambda c: c.fetchval("SELECT 1"), read=True)

    async def _run(self, fn: Callable[[Any], Awaitable[T]], *, read: bool = False) -> T:
        """Run `fn` on a pooled connection; outages become StoreError (the API answers 503).

        A deadlock or serialization failure rolled the whole transaction back, so it runs again. A
        lost connection is retried only for reads: a write may have committed before the loss."""
        pool = self._pool
        if pool is None:
            raise StoreError("the PostgreSQL store is not open")
        for attempt in itertools.count(1):
            try:
                async with pool.acquire(timeout=self._command_timeout) as conn:
                    return await fn(conn)
            except Exception as exc:
                if attempt < _ATTEMPTS and _sqlstate(exc) in _RETRY_STATES:
                    # by design no two of our transactions wait on each other in a cycle: say so if they did
                    log.warning("transaction rolled back (%s: %s); running it again", _sqlstate(exc), exc)
                    continue
                if read and attempt == 1 and _connection_lost(exc):
                    continue
                if _unavailable(exc):
                    raise StoreError(f"database unavailable: {exc}") from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- cross-instance wake-ups ----------------------------------------------------------

    def on_work(self, callback: Callable[[str], None]) -> None:
        """Call `callback("jobs")` / `callback("deliveries")` when any instance makes work due.

        A dedicated connection LISTENs (a pooled one would lose its LISTEN when handed to other work);
        writers NOTIFY in the transaction that makes the work due, so a wake-up never arrives before the
        row is visible. If that connection drops, a background task reconnects with backoff and then
        calls back once for each kind: notifications sent meanwhile are lost, the work is not."""
        self._callbacks.append(callback)
        if self._pool is not None:
            self._start_listener()

    @property
    def listener_pid(self) -> int | None:
        """The backend pid of the LISTEN connection while it is up (for operators and tests)."""
        conn = self._listen_conn
        return None if conn is None or conn.is_closed() else int(conn.get_server_pid())

    def _start_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="gateway-pg-listen")

    def _notify_callbacks(self, kind: str) -> None:
        for callback in list(self._callbacks):
            try:
                callback(kind)
            except Exception:
                log.exception("on_work callback failed for %r", kind)

    def _on_notification(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload in ("jobs", "deliveries"):
            self._notify_callbacks(payload)

    async def _listen(self) -> None:
        low, high = self._backoff
        delay = low
        missed = False  # True once a notification may have been sent while we were not listening
        while not self._closing:
            conn: Any = None
            try:
                conn = await asyncpg.connect(
                    self.url,
                    timeout=self._command_timeout,
                    server_settings={"application_name": f"{self.application_name}-listener"},
                )
                lost = _termination_event(conn)
                await conn.add_listener(self.channel, self._on_notification)
                self._listen_conn = conn
                if missed:
                    log.info("LISTEN connection re-established")
                    self._notify_callbacks("jobs")
                    self._notify_callbacks("deliveries")
                    missed = False
                delay = low
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=self._keepalive)
                    if not lost.is_set():
                        # a peer that vanished without closing the socket shows itself only here
                        await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=self._keepalive)
                log.warning("LISTEN connection lost; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN connection failed (%s); retrying in %.1fs", exc, delay)
            finally:
                missed = True
                self._listen_conn = None
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            if self._closing:
                break
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, high)

    # ---- keys and policies ----------------------------------------------------------------

    async def add_api_key(self, tenant_id: str, key_hash: str, now: float) -> str:
        key_id = "key_" + ids.ulid(now)
        await self._run(lambda c: c.execute(Q["insert_key"], key_id, tenant_id, key_hash, now))
        return key_id

    async def tenant_for_key(self, key_hash: str) -> str | None:
        value = await self._run(lambda c: c.fetchval(Q["tenant_for_key"], key_hash), read=True)
        return None if value is None else str(value)

    async def revoke_api_key(self, key_hash: str, now: float) -> bool:
        status = await self._run(lambda c: c.execute(Q["revoke_key"], key_hash, now))
        return _rowcount(status) == 1

    async def count_api_keys(self) -> int:
        return int(await self._run(lambda c: c.fetchval(Q["count_api_keys"]), read=True))

    async def put_policy(self, tenant_id: str, name: str, source: Mapping[str, Any], now: float) -> None:
        await self._run(lambda c: c.execute(Q["put_policy"], tenant_id, name, to_json(source), now))

    async def get_policy(self, tenant_id: str, name: str) -> PolicyRecord | None:
        row = await self._run(lambda c: c.fetchrow(Q["get_policy"], tenant_id, name), read=True)
        return None if row is None else PolicyRecord(row[0], from_json(row[1]), row[2])

    async def list_policies(self, tenant_id: str) -> list[PolicyRecord]:
        rows = await self._run(lambda c: c.fetch(Q["list_policies"], tenant_id), read=True)
        return [PolicyRecord(r[0], from_json(r[1]), r[2]) for r in rows]

    async def delete_policy(self, tenant_id: str, name: str) -> bool:
        status = await self._run(lambda c: c.execute(Q["delete_policy"], tenant_id, name))
        return _rowcount(status) == 1

    # ---- jobs -----------------------------------------------------------------------------

    async def create_job(
        self,
        job: NewJob,
        *,
        claim_for: str | None,
        lease: float,
        idempotency_ttl: float,
        filtered: FilterOutcome | None = None,
    ) -> tuple[Job, bool]:
        """One INSERT on the hot path. With an Idempotency-Key, the unique index picks one winner among
        concurrent creates on any instance; a loser reads the winner's job (its INSERT waited for the
        winner's commit, so the next statement sees it). A key past its TTL is freed and tried again.
        A job the request filtered already is inserted at its next status, and its webhooks in the
        same statement (a CTE), so a losing INSERT queues none."""
        now = job.created_at
        start = initial_state(job, filtered, now=now, claim_for=claim_for, lease=lease)
        a = _Args()
        a.values = [
            job.id,
            job.tenant_id,
            start.status.value,
            job.mode.value,
            job.policy,
            start.input_text,
            start.output_text,
            None if start.inbound is None else to_json(start.inbound),
            None if start.outbound is None else to_json(start.outbound),
            job.webhook_url,
            job.secret_enc,
            job.signing_key_enc,
            to_json(job.metadata),
            now,
            job.expires_at,
            start.finished_at,
            start.run_at,
            start.lease_owner,
            start.error_code,
            start.error_message,
            job.idem_key,
            job.idem_hash,
        ]
        notify = ""
        if start.status in RUNNABLE and not claim_for:
            notify = f", pg_notify({a(self.channel, 'text')}, 'jobs')"
        sql = Q["insert_job"].replace("{notify}", notify)
        if filtered is not None and filtered.deliveries:
            deliveries = self._insert_deliveries(
                a, "j", filtered.deliveries, now=now, claim_for=claim_for, lease=lease
            )
            sql = f"WITH j AS ({sql}), {deliveries} SELECT * FROM j"
        summary = DeliverySummary(0, None, None, None, None) if job.webhook_url else None

        async def op(c: Any) -> tuple[Job, bool]:
            for _ in range(_ATTEMPTS):
                row = await c.fetchrow(sql, *a.values)
                if row is not None:
                    return row_to_job(row, summary), True
                existing = await c.fetchrow(Q["find_idem"], job.tenant_id, job.idem_key)
                if existing is None:
                    continue  # the winner was purged in between: insert again
                if existing[13] >= now - idempotency_ttl:
                    return row_to_job(existing), False
                await c.execute(Q["forget_idem"], existing[0], job.idem_key)
            raise StoreError("the Idempotency-Key kept changing hands; try again")

        return await self._run(op)

    async def get_job(self, tenant_id: str, job_id: str) -> Job | None:
        row = await self._run(lambda c: c.fetchrow(Q["get_job"], job_id, tenant_id), read=True)
        return None if row is None else _row_to_job_with_summary(row)

    async def list_jobs(
        self, tenant_id: str, *, status: JobStatus | None, limit: int, before_id: str | None
    ) -> list[Job]:
        args: list[Any] = [tenant_id, before_id or "~", limit]  # "~" sorts after every id (COLLATE "C")
        query = Q["list_jobs"]
        if status is not None:
            args.append(status.value)
            query = Q["list_jobs_status"]
        rows = await self._run(lambda c: c.fetch(query, *args), read=True)
        return [_row_to_job_with_summary(r) for r in rows]

    async def list_attempts(self, tenant_id: str, job_id: str) -> list[Attempt]:
        rows = await self._run(lambda c: c.fetch(Q["list_attempts"], job_id, tenant_id), read=True)
        return [row_to_attempt(r) for r in rows]

    # ---- transitions ----------------------------------------------------------------------

    def _job_update(
        self,
        a: _Args,
        job_id: str,
        path: Sequence[JobStatus],
        *,
        now: float,
        owner: str | None,
        changes: JobChanges,
        claim_for: str | None,
        lease: float,
        tenant_id: str | None = None,
        unexpired: bool = False,
        from_any: Collection[JobStatus] | None = None,
        extra_where: str = "",
        returning: str = "id, tenant_id",
    ) -> str:
        """The compare-and-set UPDATE of a transition (SqliteStore._transition_op's, column for column).

        A runnable target is claimable at once or leased to `claim_for`; when nobody local takes it,
        the RETURNING clause NOTIFYs the other instances (in this statement's transaction)."""
        target = path[-1]
        now_ref = a(now, "float8")
        sets = [f"status = {a(target.value, 'text')}", f"updated_at = {now_ref}", f"status_since = {now_ref}"]
        if target in TERMINAL:
            sets.append(f"finished_at = {now_ref}")
        notify = ""
        if target in RUNNABLE:
            sets.append(f"run_at = {a(now + lease if claim_for else now, 'float8')}")
            sets.append(f"lease_owner = {a(claim_for, 'text')}")
            if not claim_for:
                notify = f", pg_notify({a(self.channel, 'text')}, 'jobs')"
        else:
            sets += ["run_at = NULL", "lease_owner = NULL"]
        cleared = {"input_text": changes.clear_input, "output_text": changes.clear_output}
        for column in ("input_text", "output_text", "error_code", "error_message"):
            value = getattr(changes, column)
            if cleared.get(column):
                sets.append(f"{column} = NULL")  # as in SQLite, where the later assignment wins
            elif value is not None:
                sets.append(f"{column} = {a(value, 'text')}")
        for column in ("inbound", "outbound"):
            value = getattr(changes, column)
            if value is not None:
                sets.append(f"{column} = {a(to_json(value), 'json')}")
        where = [f"id = {a(job_id, 'text')}"]
        if from_any is None:
            where.append(f"status = {a(path[0].value, 'text')}")
        else:
            where.append(f"status = ANY({a(sorted(s.value for s in from_any), 'text[]')})")
        if owner is not None:
            where.append(f"lease_owner = {a(owner, 'text')}")
        if tenant_id is not None:
            where.append(f"tenant_id = {a(tenant_id, 'text')}")
        if unexpired:
            where.append(f"expires_at > {now_ref}")
        if extra_where:
            where.append(extra_where)
        return f"UPDATE jobs SET {', '.join(sets)} WHERE {' AND '.join(where)} RETURNING {returning}{notify}"

    def _insert_deliveries(
        self,
        a: _Args,
        source: str,
        deliveries: Sequence[NewDelivery],
        *,
        now: float,
        claim_for: str | None,
        lease: float,
    ) -> str:
        """A CTE that INSERTs the job's webhooks (`source` yields the job's id and tenant_id), pending,
        due at once or leased to `claim_for`; unclaimed ones NOTIFY the other instances."""
        due = now + lease if claim_for else now
        rows = [(d.id, d.event, d.url, d.body, d.deadline, due, claim_for) for d in deliveries]
        notify = "" if claim_for else f", pg_notify({a(self.channel, 'text')}, 'deliveries')"
        names = ", ".join(c for c, _ in _DELIVERY_COLUMNS)
        now_ref = a(now, "float8")
        return (
            f"i AS (INSERT INTO deliveries (job_id, tenant_id, state, attempts, created_at, next_attempt_at,"
            f" {names}) SELECT j.id, j.tenant_id, 'pending', 0, {now_ref}, {now_ref}, n.* FROM {source} j"
            f" CROSS JOIN {_unnest(a, _DELIVERY_COLUMNS, rows, 'n')} RETURNING id{notify})"
        )

    async def _stop_deliveries(self, c: Any, job_ids: Sequence[str]) -> None:
        await c.execute(Q["cancel_pending_deliveries"], list(job_ids))

    async def _expire_locked(
        self, c: Any, job_id: str, status: JobStatus, *, now: float, tenant_id: str
    ) -> None:
        """A request found the job (locked by the caller, in `status`) past expires_at before the
        sweeper did: expire it and stop its webhooks, inside the caller's transaction."""
        await self._transition_stopping(
            c,
            job_id,
            (status, JobStatus.EXPIRED),
            now=now,
            owner=None,
            changes=expiry_changes(status),
            deliveries=(),
            claim_for=None,
            lease=0.0,
            tenant_id=tenant_id,
        )

    async def _transition_stopping(
        self,
        c: Any,
        job_id: str,
        path: Sequence[JobStatus],
        *,
        now: float,
        owner: str | None,
        changes: JobChanges,
        deliveries: Sequence[NewDelivery],
        claim_for: str | None,
        lease: float,
        tenant_id: str | None = None,
        from_any: Collection[JobStatus] | None = None,
    ) -> bool:
        """A transition to cancelled/expired, inside the caller's transaction: the job's CAS, then (a new
        statement, so it sees webhooks committed while we waited for the job) its pending webhooks."""
        a = _Args()
        update = self._job_update(
            a,
            job_id,
            path,
            now=now,
            owner=owner,
            changes=changes,
            claim_for=claim_for,
            lease=lease,
            tenant_id=tenant_id,
            from_any=from_any,
        )
        if not await c.fetch(update, *a.values):
            return False
        await self._stop_deliveries(c, [job_id])
        if deliveries:
            a = _Args()
            source = f"(SELECT id, tenant_id FROM jobs WHERE id = {a(job_id, 'text')})"
            insert = self._insert_deliveries(a, source, deliveries, now=now, claim_for=claim_for, lease=lease)
            await c.execute(f"WITH {insert} SELECT count(*) FROM i", *a.values)
        return True

    async def transition(
        self,
        job_id: str,
        path: Sequence[JobStatus],
        *,
        now: float,
        owner: str | None = None,
        changes: JobChanges = JobChanges(),  # noqa: B008
        deliveries: Sequence[NewDelivery] = (),
        claim_for: str | None = None,
        lease: float = 0.0,
    ) -> bool:
        check_path(path)
        if path[-1] in STOPS_DELIVERY:

            async def stopping(c: Any) -> bool:
                async with c.transaction():
                    return await self._transition_stopping(
                        c,
                        job_id,
                        path,
                        now=now,
                        owner=owner,
                        changes=changes,
                        deliveries=deliveries,
                        claim_for=claim_for,
                        lease=lease,
                    )

            return await self._run(stopping)

        # the pipeline's hot path: the CAS and the new webhooks in ONE statement
        a = _Args()
        update = self._job_update(
            a, job_id, path, now=now, owner=owner, changes=changes, claim_for=claim_for, lease=lease
        )
        ctes = [f"j AS ({update})"]
        if deliveries:
            ctes.append(
                self._insert_deliveries(a, "j", deliveries, now=now, claim_for=claim_for, lease=lease)
            )
        sql = f"WITH {', '.join(ctes)} SELECT count(*) FROM j"
        return bool(await self._run(lambda c: c.fetchval(sql, *a.values)) == 1)

    async def submit_response(
        self,
        tenant_id: str,
        job_id: str,
        output_text: str,
        *,
        now: float,
        claim_for: str | None,
        lease: float,
    ) -> CasResult:
        a = _Args()
        update = self._job_update(
            a,
            job_id,
            (JobStatus.AWAITING_RESPONSE, JobStatus.PROCESSING_OUTBOUND),
            now=now,
            owner=None,
            changes=JobChanges(output_text=output_text),
            claim_for=claim_for,
            lease=lease,
            tenant_id=tenant_id,
            unexpired=True,
            returning=_JOB_COLS,
        )
        # the answer makes the job's `job.awaiting_response` notice moot: a retry of it still
        # pending would reach the receiver after the job moved on (even after job.completed)
        notice = a(WebhookEvent.AWAITING_RESPONSE.value, "text")
        sql = (
            f"WITH j AS ({update}), n AS (UPDATE deliveries SET state = 'cancelled', due_at = NULL,"
            f" next_attempt_at = NULL WHERE job_id = (SELECT id FROM j) AND state = 'pending'"
            f" AND event = {notice}) SELECT {_J_JOB_COLS}, {_SUMMARY_COLS} FROM j {_SUMMARY_JOIN}"
        )

        async def op(c: Any) -> CasResult:
            row = await c.fetchrow(sql, *a.values)
            if row is not None:
                answered = _row_to_job_with_summary(row)
                if answered.delivery is not None:  # the summary read the notice before `n` stopped it
                    answered = dataclasses.replace(
                        answered, delivery=dataclasses.replace(answered.delivery, next_attempt_at=None)
                    )
                return CasResult(True, answered)
            # lost the CAS: report the job as it is now (a new statement, so the newest version)
            current = await c.fetchrow(Q["get_job"], job_id, tenant_id)
            job = None if current is None else _row_to_job_with_summary(current)
            if job is not None and job.status not in TERMINAL and job.expires_at <= now:
                # Past expires_at but not swept yet: the 409 says job_expired, so the job says it
                # too from now on (as a cancel that finds it overdue does), not at the next sweep.
                async with c.transaction():
                    found = await c.fetchrow(Q["lock_job_for_cancel"], job_id, tenant_id)
                    if found is not None and JobStatus(found[1]) not in TERMINAL and found[0] <= now:
                        await self._expire_locked(
                            c, job_id, JobStatus(found[1]), now=now, tenant_id=tenant_id
                        )
                current = await c.fetchrow(Q["get_job"], job_id, tenant_id)
                job = None if current is None else _row_to_job_with_summary(current)
            return CasResult(False, job)

        return await self._run(op)

    async def cancel_job(self, tenant_id: str, job_id: str, *, now: float) -> CasResult:
        """CAS from whatever non-terminal status the job has (re-checked on the newest row version:
        every non-terminal status may be cancelled), then stop its pending webhooks."""

        async def op(c: Any) -> CasResult:
            async with c.transaction():
                # Lock the job first (the lock order everywhere: a job before its webhooks).
                found = await c.fetchrow(Q["lock_job_for_cancel"], job_id, tenant_id)
                overdue = found is not None and JobStatus(found[1]) not in TERMINAL and found[0] <= now
                ok = False
                if overdue:
                    # Past expires_at but not swept yet: it is expired, not cancellable (409
                    # job_expired), the same answer POST /response gives.
                    await self._expire_locked(c, job_id, JobStatus(found[1]), now=now, tenant_id=tenant_id)
                elif found is not None:
                    ok = await self._transition_stopping(
                        c,
                        job_id,
                        (JobStatus.PROCESSING_INBOUND, JobStatus.CANCELLED),
                        now=now,
                        owner=None,
                        changes=JobChanges(error_code="cancelled", error_message="cancelled by the API"),
                        deliveries=(),
                        claim_for=None,
                        lease=0.0,
                        tenant_id=tenant_id,
                        from_any=NON_TERMINAL,
                    )
            row = await c.fetchrow(Q["get_job"], job_id, tenant_id)
            return CasResult(ok, None if row is None else _row_to_job_with_summary(row))

        return await self._run(op)

    async def drop_overdue_delivery(
        self, delivery_id: str, job_id: str, tenant_id: str, *, owner: str, now: float
    ) -> bool:
        async def op(c: Any) -> bool:
            async with c.transaction():
                # the job first, as everywhere: a job's lock before its webhooks'
                found = await c.fetchrow(Q["lock_job_for_cancel"], job_id, tenant_id)
                if found is not None and JobStatus(found[1]) not in TERMINAL and found[0] <= now:
                    await self._expire_locked(c, job_id, JobStatus(found[1]), now=now, tenant_id=tenant_id)
                    return True
                return _rowcount(await c.execute(Q["fail_overdue_delivery"], delivery_id, owner)) == 1

        return bool(await self._run(op))

    # ---- workers --------------------------------------------------------------------------

    async def claim_jobs(self, owner: str, *, now: float, lease: float, limit: int) -> list[Job]:
        rows = await self._run(lambda c: c.fetch(Q["claim_jobs"], owner, now, now + lease, limit))
        return [row_to_job(r) for r in rows]

    async def claim_deliveries(self, owner: str, *, now: float, lease: float, limit: int) -> list[Delivery]:
        rows = await self._run(lambda c: c.fetch(Q["claim_deliveries"], owner, now, now + lease, limit))
        return [row_to_delivery(r) for r in rows]

    async def renew_leases(
        self, owner: str, job_ids: Sequence[str], delivery_ids: Sequence[str], *, until: float
    ) -> None:
        """Two statements, each its own transaction: jobs and deliveries are never held together here,
        and within each table the rows are locked in id order."""

        async def op(c: Any) -> None:
            if job_ids:
                await c.execute(Q["renew_jobs"], list(job_ids), owner, until)
            if delivery_ids:
                await c.execute(Q["renew_deliveries"], list(delivery_ids), owner, until)

        if job_ids or delivery_ids:
            await self._run(op)

    async def release_leases(
        self, owner: str, job_ids: Sequence[str], delivery_ids: Sequence[str], *, now: float
    ) -> None:
        """Hand work back (shutdown): due at once, and the other instances are told so."""

        async def op(c: Any) -> None:
            if job_ids:
                await c.fetch(Q["release_jobs"], list(job_ids), owner, now, self.channel)
            if delivery_ids:
                await c.fetch(Q["release_deliveries"], list(delivery_ids), owner, now, self.channel)

        if job_ids or delivery_ids:
            await self._run(op)

    async def record_attempt(
        self,
        attempt: Attempt,
        *,
        owner: str,
        state: DeliveryState,
        now: float,
        job_path: Sequence[JobStatus] | None = None,
        job_changes: JobChanges = JobChanges(),  # noqa: B008
    ) -> bool:
        """One statement: the delivery's CAS on its lease owner, the attempt log, and the job's CAS
        (e.g. delivering -> completed). When the job changes too, its row is locked first (`lj`,
        evaluated before the delivery's row is touched) to keep the job-then-deliveries lock order.

        A retry scheduled for later sends no NOTIFY: it is not due yet, and this worker's own timer
        (or any instance's poll) picks it up when it is."""
        if job_path is not None:
            check_path(job_path)
        stops = job_path is not None and job_path[-1] in STOPS_DELIVERY
        a = _Args()
        delivery_id = a(attempt.delivery_id, "text")
        job_id = a(attempt.job_id, "text")
        started = a(attempt.started_at, "float8")
        code = a(attempt.status_code, "int4")
        error = a(_storable(attempt.error), "text")
        new_state = a(state.value, "text")
        next_at = a(attempt.next_attempt_at, "float8")
        ctes: list[str] = []
        gate = ""
        if job_path is not None and not stops:
            ctes.append(f"lj AS MATERIALIZED (SELECT id FROM jobs WHERE id = {job_id} FOR NO KEY UPDATE)")
            gate = " AND (SELECT count(*) FROM lj) >= 0"
        ctes.append(
            "d AS (UPDATE deliveries SET attempts = attempts + 1,"
            f" last_attempt_at = {started}, last_status_code = {code}, last_error = {error},"
            f" state = CASE WHEN state = 'pending' THEN {new_state} ELSE state END,"
            f" next_attempt_at = CASE WHEN state = 'pending' AND {new_state} = 'pending' THEN {next_at} END,"
            f" due_at = CASE WHEN state = 'pending' AND {new_state} = 'pending' THEN {next_at} END,"
            " lease_owner = NULL"
            f" WHERE id = {delivery_id} AND lease_owner = {a(owner, 'text')}{gate} RETURNING attempts)"
        )
        ctes.append(
            "a AS (INSERT INTO delivery_attempts (delivery_id, job_id, event, attempt, started_at,"
            " duration_ms, status_code, error, response_excerpt, next_attempt_at)"
            f" SELECT {delivery_id}, {job_id}, {a(attempt.event, 'text')}, d.attempts, {started},"
            f" {a(attempt.duration_ms, 'float8')}, {code}, {error},"
            f" {a(_storable(attempt.response_excerpt), 'text')}, {next_at} FROM d"
            f" ON CONFLICT (delivery_id, attempt) DO UPDATE SET {_ATTEMPT_UPSERT})"
        )
        if job_path is not None and not stops:
            update = self._job_update(
                a,
                attempt.job_id,
                job_path,
                now=now,
                owner=None,
                changes=job_changes,
                claim_for=None,
                lease=0.0,
                extra_where="EXISTS (SELECT 1 FROM d)",
                returning="id",
            )
            ctes.append(f"j AS ({update})")
        sql = f"WITH {', '.join(ctes)} SELECT count(*) FROM d"

        if not stops:
            return bool(await self._run(lambda c: c.fetchval(sql, *a.values)) == 1)

        assert job_path is not None

        async def stopping(c: Any) -> bool:
            async with c.transaction():
                await c.execute(Q["lock_job"], attempt.job_id)
                if await c.fetchval(sql, *a.values) != 1:
                    return False
                await self._transition_stopping(
                    c,
                    attempt.job_id,
                    job_path,
                    now=now,
                    owner=None,
                    changes=job_changes,
                    deliveries=(),
                    claim_for=None,
                    lease=0.0,
                )
                return True

        return await self._run(stopping)

    # ---- sweeper and health ---------------------------------------------------------------

    async def expire_due(self, *, now: float, limit: int) -> list[str]:
        """Safe on every instance at once: each takes a disjoint batch (SKIP LOCKED), so each job
        expires exactly once and no sweeper waits for another."""

        async def op(c: Any) -> list[str]:
            async with c.transaction():
                rows = await c.fetch(Q["expire_due"], now, limit)
                if rows:
                    await self._stop_deliveries(c, [r[0] for r in rows])
            return [r[0] for r in sorted(rows, key=lambda r: (r[1], r[0]))]

        return await self._run(op)

    async def purge_finished(self, *, before: float, limit: int) -> int:
        """Lock a batch of finished jobs (SKIP LOCKED: sweepers on other instances take other jobs),
        delete their webhooks (waiting out an attempt being recorded), then, in a new statement that
        sees that attempt, their attempt log and the jobs."""

        async def op(c: Any) -> int:
            async with c.transaction():
                victims = [r[0] for r in await c.fetch(Q["purge_candidates"], before, limit)]
                if not victims:
                    return 0
                await c.execute(Q["purge_deliveries"], victims)
                return _rowcount(await c.execute(Q["purge_jobs"], victims))

        return await self._run(op)

    async def queue_stats(self) -> QueueStats:
        row = await self._run(lambda c: c.fetchrow(Q["queue_stats"]), read=True)
        queues = {
            name: QueueStat(depth=int(row[i] or 0), oldest_since=row[5 + i]) for i, name in enumerate(QUEUES)
        }
        return QueueStats(queues=queues, retrying=int(row[4] or 0))
