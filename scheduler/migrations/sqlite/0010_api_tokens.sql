-- API tokens: the secret is never stored, only its SHA-256 (hex). A revoked token keeps
-- its row (revoked_at set) so `chimectl token ls` can show it and its name stays taken.
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    apps TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    revoked_at INTEGER
);
