-- Named queries for gateway/store/postgres.py (asyncpg: $n parameters). Job columns are selected in
-- job_columns order; {job_columns} is that list, {j_job_columns} the same list on the alias `j`.
-- Statements that update several rows a concurrent transaction may also hold lock them in id order
-- first (`... ORDER BY id FOR NO KEY UPDATE`), so two of them can never wait on each other in a cycle.

-- name: job_columns
id, tenant_id, status, mode, policy, input_text, output_text, inbound, outbound, webhook_url,
secret_enc, signing_key_enc, metadata, created_at, updated_at, expires_at, finished_at,
error_code, error_message, idem_key, idem_hash, lease_owner

-- name: summary_columns
s.attempts, l.last_attempt_at, l.last_status_code, s.next_attempt_at, l.last_error

-- name: summary_join
-- The contract's `delivery` object, folded from the job's deliveries in the same round trip.
LEFT JOIN LATERAL (
    SELECT sum(d.attempts)::bigint AS attempts,
           min(d.next_attempt_at) FILTER (WHERE d.state = 'pending') AS next_attempt_at
      FROM deliveries d
     WHERE d.job_id = j.id AND j.webhook_url IS NOT NULL
) s ON true
LEFT JOIN LATERAL (
    SELECT d.last_attempt_at, d.last_status_code, d.last_error
      FROM deliveries d
     WHERE d.job_id = j.id AND j.webhook_url IS NOT NULL
     ORDER BY d.last_attempt_at DESC NULLS LAST, d.created_at, d.id
     LIMIT 1
) l ON true

-- name: insert_job
-- Idempotency across instances: the partial unique index decides which INSERT wins; the losers get no
-- row back and read the winner's job. The store appends a pg_notify() when no local worker took the job,
-- and wraps it in a CTE that queues its webhooks when the request filtered the job already.
INSERT INTO jobs (id, tenant_id, status, mode, policy, input_text, output_text, inbound, outbound,
                  webhook_url, secret_enc, signing_key_enc, metadata, created_at, updated_at, status_since,
                  expires_at, finished_at, run_at, lease_owner, error_code, error_message, idem_key, idem_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::json, $9::json, $10, $11, $12, $13::json, $14::float8, $14::float8,
        $14::float8, $15::float8, $16::float8, $17::float8, $18, $19, $20, $21, $22)
ON CONFLICT (tenant_id, idem_key) WHERE idem_key IS NOT NULL DO NOTHING
RETURNING {job_columns}{notify}

-- name: find_idem
SELECT {job_columns} FROM jobs WHERE tenant_id = $1 AND idem_key = $2

-- name: forget_idem
UPDATE jobs SET idem_key = NULL WHERE id = $1 AND idem_key = $2

-- name: get_job
SELECT {j_job_columns}, {summary_columns} FROM jobs j {summary_join}
 WHERE j.id = $1 AND j.tenant_id = $2

-- name: list_jobs
SELECT {j_job_columns}, {summary_columns} FROM jobs j {summary_join}
 WHERE j.tenant_id = $1 AND j.id < $2
 ORDER BY j.id DESC LIMIT $3

-- name: list_jobs_status
SELECT {j_job_columns}, {summary_columns} FROM jobs j {summary_join}
 WHERE j.tenant_id = $1 AND j.status = $4 AND j.id < $2
 ORDER BY j.id DESC LIMIT $3

-- name: list_attempts
SELECT a.delivery_id, a.job_id, a.event, a.attempt, a.started_at, a.duration_ms, a.status_code, a.error,
       a.response_excerpt, a.next_attempt_at
  FROM delivery_attempts a JOIN jobs j ON j.id = a.job_id
 WHERE a.job_id = $1 AND j.tenant_id = $2
 ORDER BY a.started_at, a.attempt

-- name: claim_jobs
-- One round trip: pick due rows nobody else is locking, push run_at to the lease's end, return them.
WITH picked AS (
    SELECT id FROM jobs
     WHERE run_at <= $2
     ORDER BY run_at
     LIMIT $4
       FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE jobs SET run_at = $3, lease_owner = $1
 WHERE id IN (SELECT id FROM picked)
RETURNING {job_columns}

-- name: claim_deliveries
WITH picked AS (
    SELECT id FROM deliveries
     WHERE state = 'pending' AND due_at <= $2
     ORDER BY due_at
     LIMIT $4
       FOR NO KEY UPDATE SKIP LOCKED
), claimed AS (
    UPDATE deliveries SET due_at = $3, lease_owner = $1
     WHERE id IN (SELECT id FROM picked)
    RETURNING id, job_id, tenant_id, event, url, body, state, attempts, deadline, created_at
)
SELECT d.id, d.job_id, d.tenant_id, d.event, d.url, d.body, d.state, d.attempts, d.deadline, d.created_at,
       j.secret_enc, j.signing_key_enc, j.status
  FROM claimed d JOIN jobs j ON j.id = d.job_id
 ORDER BY d.id

-- name: renew_jobs
UPDATE jobs SET run_at = $3
 WHERE id IN (SELECT id FROM jobs
               WHERE id = ANY($1::text[]) AND lease_owner = $2 AND run_at IS NOT NULL
               ORDER BY id FOR NO KEY UPDATE)

-- name: renew_deliveries
UPDATE deliveries SET due_at = $3
 WHERE id IN (SELECT id FROM deliveries
               WHERE id = ANY($1::text[]) AND lease_owner = $2 AND state = 'pending'
               ORDER BY id FOR NO KEY UPDATE)

-- name: release_jobs
UPDATE jobs SET run_at = $3, lease_owner = NULL
 WHERE id IN (SELECT id FROM jobs
               WHERE id = ANY($1::text[]) AND lease_owner = $2 AND run_at IS NOT NULL
               ORDER BY id FOR NO KEY UPDATE)
RETURNING id, pg_notify($4, 'jobs')

-- name: release_deliveries
UPDATE deliveries SET due_at = $3, lease_owner = NULL
 WHERE id IN (SELECT id FROM deliveries
               WHERE id = ANY($1::text[]) AND lease_owner = $2 AND state = 'pending'
               ORDER BY id FOR NO KEY UPDATE)
RETURNING id, pg_notify($4, 'deliveries')

-- name: lock_job
-- record_attempt takes the job's lock before its delivery's when it will change both: every writer
-- that holds a job and its deliveries took them in that order (job first), so none waits in a cycle.
SELECT id FROM jobs WHERE id = $1 FOR NO KEY UPDATE

-- name: cancel_pending_deliveries
-- A separate statement after the job's CAS (not a CTE of it): its fresh snapshot sees every delivery
-- committed before the job's lock was granted, and only the job's lock holder inserts deliveries.
UPDATE deliveries SET state = 'cancelled', due_at = NULL, next_attempt_at = NULL
 WHERE id IN (SELECT id FROM deliveries
               WHERE job_id = ANY($1::text[]) AND state = 'pending'
               ORDER BY id FOR NO KEY UPDATE)

-- name: expire_due
-- SKIP LOCKED: every instance sweeps at once, each takes a disjoint batch, none waits on another.
-- finished_at IS NULL is the compare-and-set: exactly the non-terminal statuses, each of which may expire.
WITH due AS (
    SELECT id FROM jobs
     WHERE finished_at IS NULL AND expires_at <= $1
     ORDER BY expires_at
     LIMIT $2
       FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE jobs j
   SET status = 'expired', updated_at = $1, status_since = $1, finished_at = $1,
       run_at = NULL, lease_owner = NULL, error_code = 'job_expired',
       error_message = 'the job did not finish before expires_at (it was ' || j.status || ')'
  FROM due
 WHERE j.id = due.id AND j.finished_at IS NULL
RETURNING j.id, j.expires_at

-- name: purge_candidates
SELECT id FROM jobs
 WHERE finished_at IS NOT NULL AND finished_at < $1
 ORDER BY finished_at
 LIMIT $2
   FOR UPDATE SKIP LOCKED

-- name: purge_deliveries
DELETE FROM deliveries
 WHERE id IN (SELECT id FROM deliveries WHERE job_id = ANY($1::text[]) ORDER BY id FOR UPDATE)

-- name: purge_jobs
-- After purge_deliveries, in its own statement: an attempt logged while we waited for a delivery's lock
-- is committed by now, so this snapshot sees (and deletes) it too.
WITH attempts AS (
    DELETE FROM delivery_attempts WHERE job_id = ANY($1::text[])
)
DELETE FROM jobs WHERE id = ANY($1::text[])

-- name: queue_stats
-- 32 counter rows and four index probes: the same cost at any depth.
SELECT c.processing_inbound, c.processing_outbound, c.awaiting_response, c.delivering, c.retrying,
       (SELECT min(status_since) FROM jobs WHERE status = 'processing_inbound'),
       (SELECT min(status_since) FROM jobs WHERE status = 'processing_outbound'),
       (SELECT min(status_since) FROM jobs WHERE status = 'awaiting_response'),
       (SELECT min(status_since) FROM jobs WHERE status = 'delivering')
  FROM (SELECT sum(processing_inbound)::bigint AS processing_inbound,
               sum(processing_outbound)::bigint AS processing_outbound,
               sum(awaiting_response)::bigint AS awaiting_response,
               sum(delivering)::bigint AS delivering,
               sum(retrying)::bigint AS retrying
          FROM queue_counts) c

-- name: insert_key
INSERT INTO api_keys (id, tenant_id, key_hash, created_at) VALUES ($1, $2, $3, $4)

-- name: tenant_for_key
SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL

-- name: revoke_key
UPDATE api_keys SET revoked_at = $2 WHERE key_hash = $1 AND revoked_at IS NULL

-- name: count_api_keys
SELECT count(*) FROM api_keys

-- name: put_policy
INSERT INTO policies (tenant_id, name, source, updated_at) VALUES ($1, $2, $3::json, $4)
ON CONFLICT (tenant_id, name) DO UPDATE SET source = excluded.source, updated_at = excluded.updated_at

-- name: get_policy
SELECT name, source, updated_at FROM policies WHERE tenant_id = $1 AND name = $2

-- name: list_policies
SELECT name, source, updated_at FROM policies WHERE tenant_id = $1 ORDER BY name

-- name: delete_policy
DELETE FROM policies WHERE tenant_id = $1 AND name = $2

-- name: fail_overdue_delivery
UPDATE deliveries SET state = 'failed', due_at = NULL, next_attempt_at = NULL, lease_owner = NULL
 WHERE id = $1 AND lease_owner = $2 AND state = 'pending'

-- name: lock_job_for_cancel
SELECT expires_at, status FROM jobs WHERE id = $1 AND tenant_id = $2 FOR UPDATE
