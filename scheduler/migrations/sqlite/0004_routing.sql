-- Delivery modes: each run records its job's mode and, for zone items, its zone;
-- broadcast runs keep what each consumer instance did with them.
ALTER TABLE runs ADD COLUMN mode TEXT NOT NULL DEFAULT 'group';
ALTER TABLE runs ADD COLUMN zone TEXT;
ALTER TABLE runs ADD COLUMN instances TEXT NOT NULL DEFAULT '[]';

-- Consumer instances as their presence messages report them: which zones have live
-- consumers (zone jobs without their own zone list run in those).
CREATE TABLE consumers (
    instance TEXT PRIMARY KEY,
    group_name TEXT NOT NULL,
    zone TEXT,
    broadcast INTEGER NOT NULL DEFAULT 0,
    last_seen INTEGER NOT NULL
);
CREATE INDEX consumers_seen ON consumers (last_seen);
