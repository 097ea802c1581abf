-- GET /v1/consumers: when each instance was first seen and the software it reports, and
-- the indexes that count a consumer's running runs and a group's queued ones.
ALTER TABLE consumers
    ADD COLUMN first_seen timestamptz,
    ADD COLUMN version text;
UPDATE consumers SET first_seen = last_seen;
ALTER TABLE consumers ALTER COLUMN first_seen SET NOT NULL;

-- Runs an instance has acked and not finished, by instance.
CREATE INDEX runs_running ON runs (consumer) WHERE state = 'acked';
-- Runs in flight (published, not finished), by job: the queued ones of a group.
CREATE INDEX runs_in_flight ON runs (job_id) WHERE state IN ('dispatched', 'acked');
