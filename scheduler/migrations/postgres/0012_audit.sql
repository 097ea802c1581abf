-- The audit trail: one row per change made through the API, newest read first.
CREATE TABLE audit (
    id uuid PRIMARY KEY,
    at timestamptz NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    app text,
    change jsonb NOT NULL
);
CREATE INDEX audit_at ON audit (at DESC, id DESC);
CREATE INDEX audit_target ON audit (target, at DESC);
