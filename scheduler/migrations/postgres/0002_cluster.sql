-- Clustering: shards, node registry, shard leases with fencing tokens.

-- One row: the cluster's shard count, fixed when the first node starts.
CREATE TABLE cluster (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shard_count integer NOT NULL CHECK (shard_count > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Live and recently live nodes; a node is live while its heartbeat is fresh.
CREATE TABLE nodes (
    id           text PRIMARY KEY,
    http_addr    text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- One row per shard. `token` grows on every change of owner (the fencing token);
-- `expires_at` is always computed from the database's clock.
CREATE TABLE shard_leases (
    shard       integer PRIMARY KEY,
    owner       text,
    token       bigint NOT NULL DEFAULT 0,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    acquired_at timestamptz
);

-- A job's shard, from `shard_of(id, shard_count)`; set on insert, back-filled at start-up
-- for jobs created before this migration.
ALTER TABLE jobs ADD COLUMN shard integer;
CREATE INDEX jobs_shard_next_fire ON jobs (shard, next_fire_at)
    WHERE NOT paused AND next_fire_at IS NOT NULL;

-- The node that recorded a run.
ALTER TABLE runs ADD COLUMN fired_by text;

-- Overlap policy `forbid` asks whether a job has an unfinished run.
CREATE INDEX runs_unfinished ON runs (job_id)
    WHERE state IN ('scheduled', 'dispatched', 'acked');
