-- Named queries for gateway/store/sqlite.py. Job columns are selected in JOB_COLUMNS order.

-- name: job_columns
id, tenant_id, status, mode, policy, input_text, output_text, inbound, outbound, webhook_url,
secret_enc, signing_key_enc, metadata, created_at, updated_at, expires_at, finished_at,
error_code, error_message, idem_key, idem_hash, lease_owner

-- name: insert_job
INSERT INTO jobs (id, tenant_id, status, mode, policy, input_text, output_text, inbound, outbound,
                  webhook_url, secret_enc, signing_key_enc, metadata, created_at, updated_at, status_since,
                  expires_at, finished_at, run_at, lease_owner, error_code, error_message, idem_key, idem_hash)
VALUES (:id, :tenant_id, :status, :mode, :policy, :input_text, :output_text, :inbound, :outbound,
        :webhook_url, :secret_enc, :signing_key_enc, :metadata, :now, :now, :now, :expires_at, :finished_at,
        :run_at, :lease_owner, :error_code, :error_message, :idem_key, :idem_hash)

-- name: find_idem
SELECT {job_columns} FROM jobs WHERE tenant_id = :tenant_id AND idem_key = :idem_key

-- name: forget_idem
UPDATE jobs SET idem_key = NULL WHERE id = :id

-- name: get_job
SELECT {job_columns} FROM jobs WHERE id = :id AND tenant_id = :tenant_id

-- name: list_jobs
SELECT {job_columns} FROM jobs
 WHERE tenant_id = :tenant_id AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: list_jobs_status
SELECT {job_columns} FROM jobs
 WHERE tenant_id = :tenant_id AND status = :status AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: insert_delivery
INSERT INTO deliveries (id, job_id, tenant_id, event, url, body, state, attempts, created_at, deadline,
                        due_at, lease_owner, next_attempt_at)
VALUES (:id, :job_id, (SELECT tenant_id FROM jobs WHERE id = :job_id), :event, :url, :body, 'pending', 0,
        :now, :deadline, :due_at, :lease_owner, :now)

-- name: claim_jobs
UPDATE jobs SET run_at = :until, lease_owner = :owner
 WHERE id IN (SELECT id FROM jobs WHERE run_at <= :now ORDER BY run_at LIMIT :limit)
RETURNING {job_columns}

-- name: claim_deliveries
UPDATE deliveries SET due_at = :until, lease_owner = :owner
 WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND due_at <= :now ORDER BY due_at LIMIT :limit)
RETURNING id

-- name: delivery_columns
d.id, d.job_id, d.tenant_id, d.event, d.url, d.body, d.state, d.attempts, d.deadline, d.created_at,
j.secret_enc, j.signing_key_enc, j.status

-- name: record_attempt_update
UPDATE deliveries
   SET attempts = attempts + 1,
       last_attempt_at = :started_at,
       last_status_code = :status_code,
       last_error = :error,
       state = CASE WHEN state = 'pending' THEN :state ELSE state END,
       next_attempt_at = CASE WHEN state = 'pending' AND :state = 'pending' THEN :next_attempt_at END,
       due_at = CASE WHEN state = 'pending' AND :state = 'pending' THEN :next_attempt_at END,
       lease_owner = NULL
 WHERE id = :id AND lease_owner = :owner
RETURNING attempts

-- name: insert_attempt
INSERT OR REPLACE INTO delivery_attempts (delivery_id, job_id, event, attempt, started_at, duration_ms,
                               status_code, error, response_excerpt, next_attempt_at)
VALUES (:delivery_id, :job_id, :event, :attempt, :started_at, :duration_ms, :status_code, :error,
        :response_excerpt, :next_attempt_at)

-- name: list_attempts
SELECT a.delivery_id, a.job_id, a.event, a.attempt, a.started_at, a.duration_ms, a.status_code, a.error,
       a.response_excerpt, a.next_attempt_at
  FROM delivery_attempts a JOIN jobs j ON j.id = a.job_id
 WHERE a.job_id = :job_id AND j.tenant_id = :tenant_id
 ORDER BY a.started_at, a.attempt

-- name: cancel_pending_deliveries
UPDATE deliveries SET state = 'cancelled', due_at = NULL, next_attempt_at = NULL
 WHERE job_id = :job_id AND state = 'pending'

-- name: fail_overdue_delivery
UPDATE deliveries SET state = 'failed', due_at = NULL, next_attempt_at = NULL, lease_owner = NULL
 WHERE id = :id AND lease_owner = :owner AND state = 'pending'

-- name: job_expiry_state
SELECT status, expires_at FROM jobs WHERE id = :id

-- name: cancel_pending_notice
UPDATE deliveries SET state = 'cancelled', due_at = NULL, next_attempt_at = NULL
 WHERE job_id = :job_id AND state = 'pending' AND event = :event

-- name: due_expiry
SELECT id, status FROM jobs WHERE finished_at IS NULL AND expires_at <= :now ORDER BY expires_at LIMIT :limit

-- name: purge_candidates
SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < :before ORDER BY finished_at LIMIT :limit

-- name: queue_counts
SELECT name, n FROM queue_counts

-- name: oldest_in_status
SELECT MIN(status_since) FROM jobs WHERE status = :status

-- name: insert_key
INSERT INTO api_keys (id, tenant_id, key_hash, created_at) VALUES (:id, :tenant_id, :key_hash, :now)

-- name: tenant_for_key
SELECT tenant_id FROM api_keys WHERE key_hash = :key_hash AND revoked_at IS NULL

-- name: revoke_key
UPDATE api_keys SET revoked_at = :now WHERE key_hash = :key_hash AND revoked_at IS NULL

-- name: put_policy
INSERT INTO policies (tenant_id, name, source, updated_at) VALUES (:tenant_id, :name, :source, :now)
ON CONFLICT (tenant_id, name) DO UPDATE SET source = excluded.source, updated_at = excluded.updated_at

-- name: get_policy
SELECT name, source, updated_at FROM policies WHERE tenant_id = :tenant_id AND name = :name

-- name: list_policies
SELECT name, source, updated_at FROM policies WHERE tenant_id = :tenant_id ORDER BY name

-- name: delete_policy
DELETE FROM policies WHERE tenant_id = :tenant_id AND name = :name
