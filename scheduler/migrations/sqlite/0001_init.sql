-- Jobs and runs. Instants are unix milliseconds (UTC); JSON is stored as text.
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    app          TEXT NOT NULL,
    name         TEXT NOT NULL,
    settings     TEXT NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    version      INTEGER NOT NULL,
    next_fire_at INTEGER,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (app, name)
);

-- The timer's look-ahead query: active jobs by next fire time.
CREATE INDEX jobs_next_fire ON jobs (next_fire_at, id)
    WHERE paused = 0 AND next_fire_at IS NOT NULL;

CREATE TABLE runs (
    id            TEXT PRIMARY KEY,
    job_id        TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fire_time     INTEGER NOT NULL,
    shard         INTEGER NOT NULL,
    shard_total   INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    state         TEXT NOT NULL,
    trigger       TEXT NOT NULL,
    payload       TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    dispatched_at INTEGER,
    acked_at      INTEGER,
    finished_at   INTEGER,
    consumer      TEXT,
    output        TEXT,
    error         TEXT
);

-- Run history of a job, newest first.
CREATE INDEX runs_by_job ON runs (job_id, fire_time DESC, id DESC);
-- Runs recorded but not confirmed by the broker, oldest first.
CREATE INDEX runs_unconfirmed ON runs (created_at) WHERE state = 'scheduled';
