-- The audit trail: one row per change made through the API, newest read first.
CREATE TABLE audit (
    id TEXT PRIMARY KEY,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    app TEXT,
    change TEXT NOT NULL
);
CREATE INDEX audit_at ON audit (at DESC, id DESC);
CREATE INDEX audit_target ON audit (target, at DESC);
