-- API tokens: the secret is never stored, only its SHA-256 (hex). A revoked token keeps
-- its row (revoked_at set) so `chimectl token ls` can show it and its name stays taken.
CREATE TABLE api_tokens (
    id uuid PRIMARY KEY,
    name text NOT NULL UNIQUE,
    role text NOT NULL,
    apps jsonb NOT NULL,
    secret_sha256 text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    created_by text NOT NULL,
    revoked_at timestamptz
);
