-- Observer registrations: a copy of a task goes to `chime.topics` only when a pattern an
-- observer announced recently matches the task's `<app>.<job>`.
CREATE TABLE observers (
    name text NOT NULL,
    pattern text NOT NULL,
    last_seen timestamptz NOT NULL,
    PRIMARY KEY (name, pattern)
);
CREATE INDEX observers_seen ON observers (last_seen);
