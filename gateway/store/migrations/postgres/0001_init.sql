-- Jobs, deliveries (the webhook outbox), their attempt log, keys, policies, queue counters:
-- the same tables, columns and meaning as migrations/sqlite/0001_init.sql, so both stores hand back
-- identical records.
--
-- Times are Unix seconds in double precision (SQLite's REAL): a float goes in and the same float comes out.
-- JSON columns are `json`, not `jsonb`: `json` keeps the text orjson wrote byte for byte, so key order and
-- number spelling (1.0 stays a float, 1e20 is not turned into an integer) come back as SQLite gives them.
-- Nothing queries inside them. Ids are COLLATE "C": newest-first listing and its cursor compare ids byte
-- by byte, whatever the database's locale.

CREATE TABLE api_keys (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL,
    key_hash    text NOT NULL UNIQUE,
    created_at  double precision NOT NULL,
    revoked_at  double precision
);

CREATE TABLE policies (
    tenant_id   text NOT NULL,
    name        text COLLATE "C" NOT NULL,
    source      json NOT NULL,
    updated_at  double precision NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE jobs (
    id              text COLLATE "C" PRIMARY KEY,
    tenant_id       text NOT NULL,
    status          text NOT NULL CHECK (status IN (
                        'processing_inbound', 'inbound_blocked', 'awaiting_response', 'processing_outbound',
                        'outbound_blocked', 'delivering', 'completed', 'failed', 'expired', 'cancelled')),
    mode            text NOT NULL CHECK (mode IN ('separate', 'combined')),
    policy          text NOT NULL,
    input_text      text,
    output_text     text,
    inbound         json,
    outbound        json,
    webhook_url     text,
    secret_enc      bytea,
    signing_key_enc bytea,
    metadata        json NOT NULL DEFAULT '{}',
    created_at      double precision NOT NULL,
    updated_at      double precision NOT NULL,
    status_since    double precision NOT NULL,
    expires_at      double precision NOT NULL,
    finished_at     double precision,
    run_at          double precision,   -- claimable when <= now; NULL when no worker step is pending
    lease_owner     text,
    error_code      text,
    error_message   text,
    idem_key        text,
    idem_hash       text
);
CREATE INDEX jobs_tenant ON jobs (tenant_id, id);
CREATE INDEX jobs_tenant_status ON jobs (tenant_id, status, id);
CREATE INDEX jobs_runnable ON jobs (run_at) WHERE run_at IS NOT NULL;
CREATE INDEX jobs_status_since ON jobs (status, status_since);   -- oldest in a queue: one index probe
CREATE INDEX jobs_expiry ON jobs (expires_at) WHERE finished_at IS NULL;
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
-- The arbiter of create_job's INSERT ... ON CONFLICT: one live job per (tenant, Idempotency-Key),
-- whichever instance inserts first.
CREATE UNIQUE INDEX jobs_idem ON jobs (tenant_id, idem_key) WHERE idem_key IS NOT NULL;

CREATE TABLE deliveries (
    id               text COLLATE "C" PRIMARY KEY,   -- the webhook-id, the same on every retry
    job_id           text COLLATE "C" NOT NULL,
    tenant_id        text NOT NULL,
    event            text NOT NULL,
    url              text NOT NULL,
    body             bytea NOT NULL,
    state            text NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0,
    created_at       double precision NOT NULL,
    deadline         double precision NOT NULL,
    due_at           double precision,               -- claimable when <= now (pending only)
    lease_owner      text,
    next_attempt_at  double precision,
    last_attempt_at  double precision,
    last_status_code integer,
    last_error       text,
    UNIQUE (job_id, event)
);
CREATE INDEX deliveries_due ON deliveries (due_at) WHERE state = 'pending';
CREATE INDEX deliveries_job ON deliveries (job_id);

CREATE TABLE delivery_attempts (
    delivery_id      text COLLATE "C" NOT NULL,
    job_id           text COLLATE "C" NOT NULL,
    event            text NOT NULL,
    attempt          integer NOT NULL,
    started_at       double precision NOT NULL,
    duration_ms      double precision NOT NULL,
    status_code      integer,
    error            text,
    response_excerpt text,
    next_attempt_at  double precision,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX attempts_job ON delivery_attempts (job_id);

-- Queue depths kept by triggers, so health answers in constant time at any depth (never count(*) jobs).
--
-- One counter row per queue would serialise every instance's writes on it, so the counts are spread
-- over 32 slot rows, summed on read. A transaction adds all its deltas to ONE slot, picked by its
-- transaction id (concurrent transactions have consecutive ids, so they land on different slots), and
-- one row holds every queue's column so that a transaction locks exactly one counter row.
--
-- The triggers are DEFERRABLE INITIALLY DEFERRED constraint triggers: they run at COMMIT, after the
-- transaction has taken every job and delivery lock it needs. So the counter row is always the last lock
-- a transaction takes and, being its only counter lock, can never close a deadlock cycle.
CREATE TABLE queue_counts (
    slot                integer PRIMARY KEY,
    processing_inbound  bigint NOT NULL DEFAULT 0,
    processing_outbound bigint NOT NULL DEFAULT 0,
    awaiting_response   bigint NOT NULL DEFAULT 0,
    delivering          bigint NOT NULL DEFAULT 0,
    retrying            bigint NOT NULL DEFAULT 0
);
INSERT INTO queue_counts (slot) SELECT generate_series(0, 31);

CREATE FUNCTION gateway_count_job() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    was text;
    becomes text;
BEGIN
    IF TG_OP <> 'INSERT' THEN was := OLD.status; END IF;
    IF TG_OP <> 'DELETE' THEN becomes := NEW.status; END IF;
    UPDATE queue_counts SET
        processing_inbound = processing_inbound
            + (becomes IS NOT DISTINCT FROM 'processing_inbound')::int
            - (was IS NOT DISTINCT FROM 'processing_inbound')::int,
        processing_outbound = processing_outbound
            + (becomes IS NOT DISTINCT FROM 'processing_outbound')::int
            - (was IS NOT DISTINCT FROM 'processing_outbound')::int,
        awaiting_response = awaiting_response
            + (becomes IS NOT DISTINCT FROM 'awaiting_response')::int
            - (was IS NOT DISTINCT FROM 'awaiting_response')::int,
        delivering = delivering
            + (becomes IS NOT DISTINCT FROM 'delivering')::int
            - (was IS NOT DISTINCT FROM 'delivering')::int
     WHERE slot = txid_current() % 32;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER jobs_count_ins AFTER INSERT ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status IN ('processing_inbound', 'processing_outbound', 'awaiting_response', 'delivering'))
    EXECUTE FUNCTION gateway_count_job();
CREATE CONSTRAINT TRIGGER jobs_count_upd AFTER UPDATE OF status ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND (OLD.status IN ('processing_inbound', 'processing_outbound', 'awaiting_response', 'delivering')
               OR NEW.status IN ('processing_inbound', 'processing_outbound', 'awaiting_response', 'delivering')))
    EXECUTE FUNCTION gateway_count_job();
CREATE CONSTRAINT TRIGGER jobs_count_del AFTER DELETE ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IN ('processing_inbound', 'processing_outbound', 'awaiting_response', 'delivering'))
    EXECUTE FUNCTION gateway_count_job();

-- A delivery is "retrying" while it is pending after at least one attempt.
CREATE FUNCTION gateway_count_retrying() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    was boolean := false;
    becomes boolean := false;
BEGIN
    IF TG_OP <> 'INSERT' THEN was := OLD.state = 'pending' AND OLD.attempts > 0; END IF;
    IF TG_OP <> 'DELETE' THEN becomes := NEW.state = 'pending' AND NEW.attempts > 0; END IF;
    UPDATE queue_counts SET retrying = retrying + becomes::int - was::int WHERE slot = txid_current() % 32;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER deliveries_retrying_ins AFTER INSERT ON deliveries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.state = 'pending' AND NEW.attempts > 0)
    EXECUTE FUNCTION gateway_count_retrying();
CREATE CONSTRAINT TRIGGER deliveries_retrying_upd AFTER UPDATE ON deliveries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.state = 'pending' AND OLD.attempts > 0) IS DISTINCT FROM (NEW.state = 'pending' AND NEW.attempts > 0))
    EXECUTE FUNCTION gateway_count_retrying();
CREATE CONSTRAINT TRIGGER deliveries_retrying_del AFTER DELETE ON deliveries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.state = 'pending' AND OLD.attempts > 0)
    EXECUTE FUNCTION gateway_count_retrying();
