-- Only a job with overlap policy `forbid` asks whether it has an unfinished run, yet
-- `runs_unfinished` indexed every run: one index entry per fire, about a sixth of a run
-- insert's WAL records. Each run now records its job's policy (brought up to date while
-- it is unfinished when the job changes to `forbid`), and only `forbid` runs are indexed.
-- Adding a column with a constant default rewrites nothing.
ALTER TABLE runs ADD COLUMN overlap text NOT NULL DEFAULT 'allow';

UPDATE runs SET overlap = 'forbid'
FROM jobs
WHERE jobs.id = runs.job_id
  AND jobs.settings->>'overlap' = 'forbid'
  AND runs.state IN ('scheduled', 'dispatched', 'acked', 'failed');

DROP INDEX runs_unfinished;
CREATE INDEX runs_unfinished ON runs (job_id)
    WHERE overlap = 'forbid' AND state IN ('scheduled', 'dispatched', 'acked', 'failed');
