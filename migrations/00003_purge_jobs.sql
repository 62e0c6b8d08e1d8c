-- ADR 009's purge of expired keys, inside the database, by pg_cron.
--
-- The purge deletes in bounded batches and commits after each, so a purge of
-- a million rows never holds locks that a concurrent claim would wait on for
-- longer than one batch. Reads treat an expired record as absent, so when the
-- purge runs never changes what a client sees.
--
-- Job names carry the schema when it is not `public`, so that schemas side by
-- side in one database (tests give each test its own) keep their own jobs.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_cron') THEN
        RAISE EXCEPTION 'the pg_cron extension is not installed on this server'
            USING HINT = 'Install pg_cron (Debian: postgresql-15-cron; Aurora: add pg_cron to shared_preload_libraries in the cluster parameter group) and run the migrations again.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')
       AND current_setting('shared_preload_libraries') NOT LIKE '%pg_cron%' THEN
        RAISE EXCEPTION 'pg_cron is installed but not preloaded'
            USING HINT = 'Set shared_preload_libraries = ''pg_cron'' and cron.database_name to this database, restart the server, and run the migrations again.';
    END IF;
END
$$;
-- +goose StatementEnd

CREATE EXTENSION IF NOT EXISTS pg_cron;

-- Deletes expired keys, batch_size rows at a time, committing after each
-- batch, at most max_batches batches a run (the next run goes on). A
-- procedure rather than a function: only a procedure may commit between
-- batches. SKIP LOCKED leaves rows that a claim is taking over to the claim.
--
-- pg_cron runs the job with its own search_path, and a procedure that
-- commits may not carry a SET search_path clause, so the table's schema is
-- written into the body when the procedure is created.
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($proc$
        CREATE PROCEDURE %1$I.purge_expired_idempotency_keys(batch_size integer DEFAULT 5000, max_batches integer DEFAULT 2000)
        LANGUAGE plpgsql
        AS $body$
        DECLARE
            deleted integer;
            batches integer := 0;
        BEGIN
            LOOP
                DELETE FROM %1$I.idempotency_keys
                WHERE ctid = ANY (ARRAY(
                    SELECT ctid FROM %1$I.idempotency_keys
                    WHERE expires_at < now()
                    LIMIT batch_size
                    FOR UPDATE SKIP LOCKED));
                GET DIAGNOSTICS deleted = ROW_COUNT;
                COMMIT;
                batches := batches + 1;
                EXIT WHEN deleted < batch_size OR batches >= max_batches;
            END LOOP;
        END
        $body$;
    $proc$, current_schema());
END
$do$;
-- +goose StatementEnd

-- ADR 009's hourly schedule, and a daily purge of pg_cron's own run history
-- (cron.job_run_details grows by a row a run and is never trimmed by pg_cron).
SELECT cron.schedule(
    'purge-idempotency' || CASE WHEN current_schema() = 'public' THEN '' ELSE '-' || current_schema() END,
    '0 * * * *',
    format('CALL %I.purge_expired_idempotency_keys()', current_schema()));

SELECT cron.schedule(
    'purge-cron-history' || CASE WHEN current_schema() = 'public' THEN '' ELSE '-' || current_schema() END,
    '30 3 * * *',
    $$DELETE FROM cron.job_run_details WHERE end_time < now() - interval '7 days'$$);

-- +goose Down
SELECT cron.unschedule(jobid) FROM cron.job
WHERE jobname IN (
    'purge-idempotency' || CASE WHEN current_schema() = 'public' THEN '' ELSE '-' || current_schema() END,
    'purge-cron-history' || CASE WHEN current_schema() = 'public' THEN '' ELSE '-' || current_schema() END);
DROP PROCEDURE purge_expired_idempotency_keys(integer, integer);
