-- Observer registrations: a copy of a task goes to `chime.topics` only when a pattern an
-- observer announced recently matches the task's `<app>.<job>`.
CREATE TABLE observers (
    name TEXT NOT NULL,
    pattern TEXT NOT NULL,
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (name, pattern)
);
CREATE INDEX observers_seen ON observers (last_seen);
