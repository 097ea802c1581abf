-- Only a job with overlap policy `forbid` asks whether it has an unfinished run, yet
-- `runs_unfinished` indexed every run: one index entry per fire. Each run now records
-- its job's policy (brought up to date while it is unfinished when the job changes to
-- `forbid`), and only `forbid` runs are indexed.
ALTER TABLE runs ADD COLUMN overlap TEXT NOT NULL DEFAULT 'allow';

UPDATE runs SET overlap = 'forbid'
WHERE state IN ('scheduled', 'dispatched', 'acked', 'failed')
  AND job_id IN (SELECT id FROM jobs WHERE json_extract(settings, '$.overlap') = 'forbid');

DROP INDEX runs_unfinished;
CREATE INDEX runs_unfinished ON runs (job_id)
    WHERE overlap = 'forbid' AND state IN ('scheduled', 'dispatched', 'acked', 'failed');
