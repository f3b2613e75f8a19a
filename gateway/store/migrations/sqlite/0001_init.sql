-- Jobs, deliveries (the webhook outbox), their attempt log, keys, policies, queue counters.
-- Times are Unix seconds (REAL). JSON columns hold orjson text.

CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    key_hash    TEXT NOT NULL UNIQUE,
    created_at  REAL NOT NULL,
    revoked_at  REAL
);

CREATE TABLE policies (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    source      TEXT NOT NULL,
    updated_at  REAL NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE jobs (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    status          TEXT NOT NULL,
    mode            TEXT NOT NULL,
    policy          TEXT NOT NULL,
    input_text      TEXT,
    output_text     TEXT,
    inbound         TEXT,
    outbound        TEXT,
    webhook_url     TEXT,
    secret_enc      BLOB,
    signing_key_enc BLOB,
    metadata        TEXT NOT NULL DEFAULT '{}',
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    status_since    REAL NOT NULL,
    expires_at      REAL NOT NULL,
    finished_at     REAL,
    run_at          REAL,            -- claimable when <= now; NULL when no worker step is pending
    lease_owner     TEXT,
    error_code      TEXT,
    error_message   TEXT,
    idem_key        TEXT,
    idem_hash       TEXT
);
CREATE INDEX jobs_tenant ON jobs (tenant_id, id);
CREATE INDEX jobs_tenant_status ON jobs (tenant_id, status, id);
CREATE INDEX jobs_runnable ON jobs (run_at) WHERE run_at IS NOT NULL;
CREATE INDEX jobs_status_since ON jobs (status, status_since);
CREATE INDEX jobs_expiry ON jobs (expires_at) WHERE finished_at IS NULL;
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_idem ON jobs (tenant_id, idem_key) WHERE idem_key IS NOT NULL;

CREATE TABLE deliveries (
    id               TEXT PRIMARY KEY,      -- the webhook-id, the same on every retry
    job_id           TEXT NOT NULL,
    tenant_id        TEXT NOT NULL,
    event            TEXT NOT NULL,
    url              TEXT NOT NULL,
    body             BLOB NOT NULL,
    state            TEXT NOT NULL,         -- pending | succeeded | failed | cancelled
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    deadline         REAL NOT NULL,
    due_at           REAL,                  -- claimable when <= now (pending only)
    lease_owner      TEXT,
    next_attempt_at  REAL,
    last_attempt_at  REAL,
    last_status_code INTEGER,
    last_error       TEXT,
    UNIQUE (job_id, event)
);
CREATE INDEX deliveries_due ON deliveries (due_at) WHERE state = 'pending';
CREATE INDEX deliveries_job ON deliveries (job_id);

CREATE TABLE delivery_attempts (
    delivery_id      TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    event            TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    started_at       REAL NOT NULL,
    duration_ms      REAL NOT NULL,
    status_code      INTEGER,
    error            TEXT,
    response_excerpt TEXT,
    next_attempt_at  REAL,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX attempts_job ON delivery_attempts (job_id);

-- Queue depths kept by triggers, so health answers in constant time at any depth.
CREATE TABLE queue_counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL);
INSERT INTO queue_counts (name, n) VALUES
    ('processing_inbound', 0), ('processing_outbound', 0), ('awaiting_response', 0),
    ('delivering', 0), ('retrying', 0);

CREATE TRIGGER jobs_count_ins AFTER INSERT ON jobs BEGIN
    UPDATE queue_counts SET n = n + 1 WHERE name = NEW.status;
END;
CREATE TRIGGER jobs_count_del AFTER DELETE ON jobs BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE name = OLD.status;
END;
CREATE TRIGGER jobs_count_upd AFTER UPDATE OF status ON jobs WHEN OLD.status <> NEW.status BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE name = OLD.status;
    UPDATE queue_counts SET n = n + 1 WHERE name = NEW.status;
END;
CREATE TRIGGER deliveries_retrying_upd AFTER UPDATE ON deliveries
WHEN (OLD.state = 'pending' AND OLD.attempts > 0) <> (NEW.state = 'pending' AND NEW.attempts > 0) BEGIN
    UPDATE queue_counts
       SET n = n + (CASE WHEN NEW.state = 'pending' AND NEW.attempts > 0 THEN 1 ELSE -1 END)
     WHERE name = 'retrying';
END;
CREATE TRIGGER deliveries_retrying_del AFTER DELETE ON deliveries
WHEN OLD.state = 'pending' AND OLD.attempts > 0 BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE name = 'retrying';
END;
