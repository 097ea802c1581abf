-- Delivery modes: each run records its job's mode and, for zone items, its zone;
-- broadcast runs keep what each consumer instance did with them.
ALTER TABLE runs
    ADD COLUMN mode text NOT NULL DEFAULT 'group',
    ADD COLUMN zone text,
    ADD COLUMN instances jsonb NOT NULL DEFAULT '[]';

-- Consumer instances as their presence messages report them: which zones have live
-- consumers (zone jobs without their own zone list run in those).
CREATE TABLE consumers (
    instance text PRIMARY KEY,
    group_name text NOT NULL,
    zone text,
    broadcast boolean NOT NULL DEFAULT false,
    last_seen timestamptz NOT NULL
);
CREATE INDEX consumers_seen ON consumers (last_seen);
