-- The timer's index no longer follows every fire. `due_bound` is a lower bound of
-- `next_fire_at` that a fire moves only when the next fire runs more than a minute past it
-- (see `DUE_BOUND_SLACK` in the PostgreSQL store); every other write sets it to
-- `next_fire_at`. A fire then changes no indexed column, so PostgreSQL updates the job in
-- place (a HOT update): no new index entries and no bloat of the job's indexes, where
-- before each fire wrote four. The look-ahead query reads the index by `due_bound` and
-- checks `next_fire_at` in the row.
ALTER TABLE jobs ADD COLUMN due_bound timestamptz;
UPDATE jobs SET due_bound = next_fire_at;

DROP INDEX jobs_next_fire;
DROP INDEX jobs_shard_next_fire;
CREATE INDEX jobs_due ON jobs (due_bound, id)
    WHERE NOT paused AND due_bound IS NOT NULL;
CREATE INDEX jobs_shard_due ON jobs (shard, due_bound)
    WHERE NOT paused AND due_bound IS NOT NULL;

-- Room on each page for the in-place versions of its jobs.
ALTER TABLE jobs SET (fillfactor = 80);
