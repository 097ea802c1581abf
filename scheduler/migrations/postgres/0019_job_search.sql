-- GET /v1/jobs: the job list filtered (app, group, mode, paused, a search text) and
-- sorted (creation order, app and name, last change), paged from a cursor (keyset: no
-- OFFSET). Each order is read through an index on it, so a page reads about a page of
-- index entries however many jobs the table holds: with no filter, with one app (the
-- main filter, and a scoped token's: an index per order of its own), with paused=true
-- (a partial index per order) or paused=false (the order's index, nearly every row
-- matching). A group or a mode is read through its own index (jobs_target_group,
-- migration 0008; jobs_by_mode) when it selects few jobs, and its jobs sorted: a page of
-- a group or mode of many jobs reads them all. A search text is checked on the rows read
-- in order. Creation order uses the primary key, app and name order the (app, name) key.
--
-- No index here names next_fire_at, in its key, an expression or its predicate: a fire
-- changes only next_fire_at (and rarely due_bound), so with no index on it PostgreSQL
-- updates the job in place (the HOT update migration 0007 set up). These indexes are
-- never written by a fire; that is why the list has no next-fire order (and a test,
-- tests/job_search_cost.rs, keeps every index of jobs off next_fire_at). On a large
-- table this migration builds its indexes while holding writes: plan a maintenance
-- window.
CREATE INDEX jobs_by_updated ON jobs (updated_at, id);
CREATE INDEX jobs_by_app ON jobs (app, id);
CREATE INDEX jobs_by_app_updated ON jobs (app, updated_at, id);
CREATE INDEX jobs_by_mode ON jobs ((settings->'target'->>'mode'));
-- The paused jobs (few), in each order: a paused job does not fire, so these change
-- only when a job is paused, resumed or edited.
CREATE INDEX jobs_paused ON jobs (id) WHERE paused;
CREATE INDEX jobs_paused_by_name ON jobs (app, name) WHERE paused;
CREATE INDEX jobs_paused_by_updated ON jobs (updated_at, id) WHERE paused;
