-- GET /v1/runs: runs searched across jobs, newest fire first (fire_time DESC, id DESC).
-- Each run carries its job's app and the group it was fired to, copied from the job row
-- when the run is inserted (a trigger, so every insert path records them; a later change
-- of the job's target does not move runs already recorded). Each index below serves one
-- main filter in page order, so a page reads about a page of index entries however many
-- runs the table holds; other filters (mode, several states, time ranges) are checked on
-- the rows the index yields. On a large table this migration rewrites every run (the
-- copy) and builds five indexes while holding writes: plan a maintenance window.
ALTER TABLE runs
    ADD COLUMN app text,
    ADD COLUMN target_group text;

UPDATE runs SET app = jobs.app, target_group = jobs.settings->'target'->>'group'
FROM jobs
WHERE jobs.id = runs.job_id;

CREATE FUNCTION runs_copy_job_fields() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.app IS NULL OR NEW.target_group IS NULL THEN
        SELECT jobs.app, jobs.settings->'target'->>'group'
          INTO NEW.app, NEW.target_group
          FROM jobs WHERE jobs.id = NEW.job_id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER runs_copy_job_fields BEFORE INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_copy_job_fields();

-- No filter, state lists, mode and fire-time ranges: the newest runs of all.
CREATE INDEX runs_recent ON runs (fire_time DESC, id DESC);
-- One app (a job filter uses runs_by_job, migration 0001).
CREATE INDEX runs_by_app ON runs (app, fire_time DESC, id DESC);
-- One group.
CREATE INDEX runs_by_group ON runs (target_group, fire_time DESC, id DESC);
-- One state (failed, dead: the few among many succeeded).
CREATE INDEX runs_by_state ON runs (state, fire_time DESC, id DESC);
-- A finish-time range.
CREATE INDEX runs_by_finish ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- A job moved to another app takes its runs along (a run is its job's app's, as reading
-- it checks); the group stays the one each run was fired to.
CREATE FUNCTION jobs_move_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET app = NEW.app WHERE job_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_move_runs AFTER UPDATE OF app ON jobs
    FOR EACH ROW WHEN (OLD.app IS DISTINCT FROM NEW.app)
    EXECUTE FUNCTION jobs_move_runs();
