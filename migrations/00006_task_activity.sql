-- The sample app's activity log: one entry per task event (created,
-- updated, deleted) that arrives on the task-events SQS queue. The
-- TaskActivityFunction records each event exactly once although SQS
-- delivers at least once: the idempotency record of the event is completed
-- in the same transaction as the entry (atomic completion), and the unique
-- index below is the last line when the key store has lost the key. LOGGED:
-- an activity entry is data, not a cache.

-- +goose Up
CREATE TABLE task_activity (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The producer's id of the event: what makes two deliveries one event.
    event_id    text        NOT NULL CHECK (char_length(event_id) BETWEEN 1 AND 200),
    -- The task's owner, as every query of the sample app filters on it.
    user_id     uuid        NOT NULL,
    -- No foreign key to tasks: the log keeps the entry of a deleted task.
    task_id     uuid        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('created', 'updated', 'deleted')),
    -- When the event happened, as its producer says.
    occurred_at timestamptz NOT NULL,
    -- When the entry was written, by the database's clock.
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- One entry per (user, event): a redelivery that finds no idempotency record
-- (an UNLOGGED key store emptied by a crash) inserts nothing.
CREATE UNIQUE INDEX task_activity_user_event ON task_activity (user_id, event_id);

-- A task's history, oldest first.
CREATE INDEX task_activity_task ON task_activity (user_id, task_id, occurred_at);

-- +goose Down
DROP TABLE task_activity;
