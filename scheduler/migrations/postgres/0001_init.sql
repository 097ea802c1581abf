-- Jobs and runs.
CREATE TABLE jobs (
    id           uuid PRIMARY KEY,
    app          text NOT NULL,
    name         text NOT NULL,
    settings     jsonb NOT NULL,
    paused       boolean NOT NULL DEFAULT false,
    version      bigint NOT NULL,
    next_fire_at timestamptz,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    UNIQUE (app, name)
);

-- The timer's look-ahead query: active jobs by next fire time.
CREATE INDEX jobs_next_fire ON jobs (next_fire_at, id)
    WHERE NOT paused AND next_fire_at IS NOT NULL;

CREATE TABLE runs (
    id            uuid PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fire_time     timestamptz NOT NULL,
    shard         integer NOT NULL,
    shard_total   integer NOT NULL,
    attempt       integer NOT NULL,
    state         text NOT NULL,
    trigger       text NOT NULL,
    payload       jsonb NOT NULL,
    created_at    timestamptz NOT NULL,
    dispatched_at timestamptz,
    acked_at      timestamptz,
    finished_at   timestamptz,
    consumer      text,
    output        jsonb,
    error         text
);

-- Run history of a job, newest first.
CREATE INDEX runs_by_job ON runs (job_id, fire_time DESC, id DESC);
-- Runs recorded but not confirmed by the broker, oldest first.
CREATE INDEX runs_unconfirmed ON runs (created_at) WHERE state = 'scheduled';
