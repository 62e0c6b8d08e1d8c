-- The sample task API's table (its contract: docs/openapi.yaml). Tasks are durable: the table is
-- LOGGED, so a crash of the server never loses a task.

-- +goose Up
CREATE TABLE tasks (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The owner: the `sub` claim of the caller's token. Every query filters on it.
    user_id     uuid        NOT NULL,
    title       text        NOT NULL CHECK (char_length(title) BETWEEN 1 AND 200),
    description text        CHECK (char_length(description) <= 2000),
    status      text        NOT NULL DEFAULT 'todo'
                            CHECK (status IN ('todo', 'in_progress', 'done')),
    due_date    date,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- The Idempotency-Key of the request that created the task, and that
    -- request's fingerprint. They outlive the UNLOGGED key store: a retry
    -- that arrives after the key store was lost (a crash empties an UNLOGGED
    -- table on vanilla PostgreSQL) finds the task here and replays it instead
    -- of creating a second one. NULL for tasks created without a key.
    idempotency_key          text,
    idempotency_request_hash text,
    CHECK ((idempotency_key IS NULL) = (idempotency_request_hash IS NULL))
);

-- One task per (user, key): the constraint that makes a duplicate create
-- impossible even when the key store has forgotten the key. Keys are scoped
-- per user, like the key store's own primary key. NULLs never collide.
CREATE UNIQUE INDEX tasks_user_idempotency_key ON tasks (user_id, idempotency_key);

-- The list endpoint: a user's tasks, newest first, paged by a
-- (created_at, id) cursor.
CREATE INDEX tasks_user_created ON tasks (user_id, created_at DESC, id DESC);

-- +goose Down
DROP TABLE tasks;
