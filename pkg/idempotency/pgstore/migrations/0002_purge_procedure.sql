-- ADR 009's purge of expired keys, as a procedure that pg_cron (or any
-- scheduler) calls: CALL <schema>.purge_expired_idempotency_keys().
--
-- The purge deletes in bounded batches and commits after each, so a purge of
-- a million rows never holds locks that a concurrent claim would wait on for
-- longer than one batch. Reads treat an expired record as absent, so when the
-- purge runs never changes what a client sees.
--
-- Deletes expired keys, batch_size rows at a time, committing after each
-- batch, at most max_batches batches a run (the next run goes on). A
-- procedure rather than a function: only a procedure may commit between
-- batches. SKIP LOCKED leaves rows that a claim is taking over to the claim.
--
-- pg_cron runs the job with its own search_path, and a procedure that
-- commits may not carry a SET search_path clause, so the table's schema (the
-- schema these migrations are applied in) is written into the body when the
-- procedure is created.
--
-- Scheduling is not part of this file: pgstore.Migrate schedules the purge
-- with pg_cron where pg_cron lives (see 0000_README.md beside this file).

-- +goose Up
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
