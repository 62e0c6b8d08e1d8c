-- The idempotency key store of ADR 009: an UNLOGGED table on the Aurora
-- writer. UNLOGGED skips the WAL; the price is that vanilla PostgreSQL empties
-- the table after a crash and that replicas cannot read it. Departures from
-- the ADR's table are explained in docs/adr/0002-idempotency-keys-table.md.
--
-- One of the key store's own migrations (package pgstore, Migrate), applied
-- in the schema the user chooses: the table goes into the current schema.

-- +goose Up
CREATE UNLOGGED TABLE idempotency_keys (
    -- The client's Idempotency-Key: a UUID v4 in lower case.
    key              text        NOT NULL CHECK (char_length(key) = 36),
    -- The authenticated user. Keys are scoped per user (see the primary key).
    user_id          uuid        NOT NULL,
    -- SHA-256 (hex) over method, path, sorted query and canonical body.
    request_hash     text        NOT NULL,
    -- 'in_progress' while the first request runs, 'completed' once its
    -- response is stored.
    status           text        NOT NULL CHECK (status IN ('in_progress', 'completed')),
    -- The response envelope {status, headers, body, isBase64Encoded}: the body
    -- is kept as a JSON string so that it replays byte for byte (a JSONB
    -- object would reorder keys and drop white space). NULL while in progress.
    response_body    jsonb,
    status_code      integer     CHECK (status_code BETWEEN 100 AND 599),
    -- The token of the invocation that holds the record (its Lambda request
    -- id). Completion and release are fenced by it.
    owner            text        NOT NULL,
    -- While in progress: when the claim stops protecting the record and may
    -- be taken over. NULL once completed.
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,

    -- Scoped per user: the same key sent by two users names two records.
    PRIMARY KEY (user_id, key),
    CONSTRAINT idempotency_keys_completed_has_response CHECK (
        (status = 'completed') = (response_body IS NOT NULL AND status_code IS NOT NULL)
    ),
    CONSTRAINT idempotency_keys_in_progress_has_lease CHECK (
        (status = 'in_progress') = (lease_expires_at IS NOT NULL)
    )
);

-- The purge job finds expired rows by this index (ADR 009: expires_at INDEX).
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

