-- GET /v1/jobs: the job list filtered (app, group, mode, paused, a search text) and
-- sorted (creation order, app and name, next fire time, last change), paged from a
-- cursor (keyset: no OFFSET). Each order is read through an index on it, so a page
-- reads about a page of index entries however many jobs the table holds; one app
-- (the main filter, and a scoped token's) has an index per order of its own. Other
-- filters are checked on the rows read, or, when they select few jobs (a rare group or
-- mode, the paused jobs), read through their own index and sorted. Creation order uses
-- the primary key, app and name order the (app, name) key; the group index is
-- jobs_target_group (migration 0008).
--
-- Next fire time changes at every fire, so the two indexes on it cost two index
-- entries per fire. On a large table this migration builds seven indexes while holding
-- writes: plan a maintenance window.
CREATE INDEX jobs_by_next_fire ON jobs (next_fire_at, id);
CREATE INDEX jobs_by_updated ON jobs (updated_at, id);
CREATE INDEX jobs_by_app ON jobs (app, id);
CREATE INDEX jobs_by_app_next_fire ON jobs (app, next_fire_at, id);
CREATE INDEX jobs_by_app_updated ON jobs (app, updated_at, id);
CREATE INDEX jobs_by_mode ON jobs ((settings->'target'->>'mode'));
CREATE INDEX jobs_paused ON jobs (id) WHERE paused;
