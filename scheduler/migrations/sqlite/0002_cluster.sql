-- A job's shard (SQLite is single-node, but jobs carry the same shard as on PostgreSQL),
-- the node that recorded each run, and the overlap policy's index.
ALTER TABLE jobs ADD COLUMN shard INTEGER;

ALTER TABLE runs ADD COLUMN fired_by TEXT;

CREATE INDEX runs_unfinished ON runs (job_id)
    WHERE state IN ('scheduled', 'dispatched', 'acked');
