-- Pause on failure (issue 38): why the scheduler paused a job itself, shown as
-- `paused_reason`; NULL for a running job or one a user paused.
ALTER TABLE jobs ADD COLUMN paused_reason TEXT;

-- The jobs the pause-on-failure check reads every pass: only those that opted in.
CREATE INDEX jobs_pause_on_failure ON jobs (id)
    WHERE NOT paused AND json_extract(settings, '$.pause_after_failures') IS NOT NULL;
