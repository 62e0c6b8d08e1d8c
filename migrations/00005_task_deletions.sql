-- What a DELETE with an Idempotency-Key deleted, so that its retry answers
-- what the first one did even when the key store has forgotten the key (a
-- completion that failed, an UNLOGGED table emptied by a crash, a purge).
-- A create records its key on the task row; a deleted task has no row left,
-- so the key moves here. Like tasks, the table is LOGGED.

-- +goose Up
CREATE TABLE task_deletions (
    -- The owner, as on tasks: every query filters on it.
    user_id                  uuid        NOT NULL,
    -- The deleted task. A task id is never reused, so one row per task.
    task_id                  uuid        NOT NULL,
    -- The Idempotency-Key of the DELETE that removed the task, and that
    -- request's fingerprint.
    idempotency_key          text        NOT NULL,
    idempotency_request_hash text        NOT NULL,
    deleted_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, task_id)
);

-- The daily purge below reads the oldest rows.
CREATE INDEX task_deletions_deleted_at ON task_deletions (deleted_at);

-- A retry arrives within seconds or minutes; keys live 24 hours by default.
-- A week covers any key TTL a deployment is likely to choose.
SELECT cron.schedule(
    'purge-task-deletions' || CASE WHEN current_schema() = 'public' THEN '' ELSE '-' || current_schema() END,
    '45 3 * * *',
    format($$DELETE FROM %I.task_deletions WHERE deleted_at < now() - interval '7 days'$$, current_schema()));

-- +goose Down
SELECT cron.unschedule(jobid) FROM cron.job
WHERE jobname = 'purge-task-deletions' || CASE WHEN current_schema() = 'public' THEN '' ELSE '-' || current_schema() END;
DROP TABLE task_deletions;
