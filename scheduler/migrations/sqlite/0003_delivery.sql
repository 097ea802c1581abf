-- At-least-once delivery: deadlines, attempt history, heartbeats and progress.
-- Until now `failed` was final; from here on it means "retry pending" and final failures
-- are `dead`.
UPDATE runs SET state = 'dead' WHERE state = 'failed';

ALTER TABLE runs ADD COLUMN ack_timeout_ms INTEGER NOT NULL DEFAULT 30000;
ALTER TABLE runs ADD COLUMN run_timeout_ms INTEGER NOT NULL DEFAULT 300000;
-- When the reconciler acts on the run next (see `Run::due_at`); NULL when nothing is pending.
ALTER TABLE runs ADD COLUMN due_at INTEGER;
ALTER TABLE runs ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN progress TEXT;
ALTER TABLE runs ADD COLUMN heartbeat_at INTEGER;

UPDATE runs SET due_at = CASE state
    WHEN 'scheduled' THEN created_at
    WHEN 'dispatched' THEN dispatched_at + ack_timeout_ms
    WHEN 'acked' THEN acked_at + run_timeout_ms
END;

-- The reconciler's query: runs past their deadline, oldest first. Its cost follows the
-- number of overdue runs, however many finished runs the table holds.
DROP INDEX runs_unconfirmed;
CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;

-- A run waiting for its retry is unfinished too (overlap policy `forbid`).
DROP INDEX runs_unfinished;
CREATE INDEX runs_unfinished ON runs (job_id)
    WHERE state IN ('scheduled', 'dispatched', 'acked', 'failed');
