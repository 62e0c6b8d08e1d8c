-- The idempotency key store: an UNLOGGED table on the Aurora writer, the
-- procedure that purges expired keys, and the store's four operations as
-- functions. UNLOGGED skips the WAL; the price is that vanilla PostgreSQL
-- empties the table after a crash and that replicas cannot read it.
--
-- The key store's own migration (package pgstore, Migrate), applied in the
-- schema the user chooses: everything goes into the current schema, and the
-- functions and the procedure are written with that schema's name, since
-- pg_cron runs the purge with its own search_path and a procedure that
-- commits may not carry a SET search_path clause.
--
-- The table keeps no CHECK constraints: PostgreSQL compiles a table's CHECK
-- expressions afresh in every statement that writes it, about a fifth of a
-- first request's server time. What they would guard is kept by the only
-- writers there are, the functions below (and the purge, which only
-- deletes): they write a status of 'in_progress' with a lease and no
-- response, or 'completed' with a response and a status code and no lease.
-- NOT NULL stays: it costs nothing of the kind.

-- +goose Up
CREATE UNLOGGED TABLE idempotency_keys (
    -- The client's Idempotency-Key: a UUID v4 in lower case.
    key              text        NOT NULL,
    -- The authenticated user. Keys are scoped per user (see the primary key).
    user_id          uuid        NOT NULL,
    -- SHA-256 (hex) over method, path, sorted query and canonical body.
    request_hash     text        NOT NULL,
    -- 'in_progress' while the first request runs, 'completed' once its
    -- response is stored.
    status           text        NOT NULL,
    -- The response envelope {status, headers, body, isBase64Encoded}: the body
    -- is kept as a JSON string so that it replays byte for byte (a JSONB
    -- object would reorder keys and drop white space). NULL while in progress.
    response_body    jsonb,
    status_code      integer,
    -- The token of the invocation that holds the record (its Lambda request
    -- id). Completion and release are fenced by it.
    owner            text        NOT NULL,
    -- While in progress: when the claim stops protecting the record and may
    -- be taken over. NULL once completed.
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,

    -- Scoped per user: the same key sent by two users names two records.
    PRIMARY KEY (user_id, key)
);

-- The purge job finds expired rows by this index (ADR 009: expires_at INDEX).
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- The purge deletes expired keys in bounded batches and commits after each,
-- so that a purge of a million rows never holds locks that a concurrent
-- claim would wait on for longer than one batch, at most max_batches
-- batches a run (the next run goes on). Reads treat an expired record as
-- absent, so when the purge runs never changes what a client sees. SKIP
-- LOCKED leaves rows that a claim is taking over to the claim. Scheduling is
-- not part of this file: pgstore.Migrate schedules the purge with pg_cron
-- where pg_cron lives.
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

-- The store's operations, each one statement and one round trip, whose
-- inner statements are planned once per server connection and cached there:
--
--     SELECT idempotency_key_claim(…)
--     SELECT idempotency_key_complete(…)
--     SELECT idempotency_key_release(…)
--     SELECT idempotency_key_renew(…)
--
-- Behind a transaction-pooling proxy a client cannot keep named prepared
-- statements, so everything it sends is parsed and planned again on every
-- call; a function call plans in a few microseconds, and the statements
-- inside it run on cached plans.
--
-- SET enable_seqscan = off: a cached plan is built once and kept. Planned
-- while the table was analysed empty (a fresh deploy, a table the purge
-- emptied), the cheapest plan for a primary-key lookup is a sequential scan,
-- and that plan would stay cached as the table fills. With sequential scans
-- disabled inside these functions every plan is the primary-key index.
--
-- Time: takeover and expiry are decided against the earlier of the caller's
-- clock (p_now) and the server's (statement_timestamp()). A caller whose
-- clock runs ahead cannot take over a lease that is live by the server's
-- clock; a caller whose clock runs behind only takes over later.
--
-- The claim decides in its one primary-key read and returns only what the
-- caller needs, as one text value: its first character says what was found,
-- and the rest carries the one thing that goes with it.
--
--     C             claimed: the caller's record was written
--     R             reclaimed: the caller's own live claim of the same request
--     P             in progress, claimed by another invocation, same request
--     {…}           completed, same request: the stored response envelope
--     Mi<hash>      in progress for another request: the stored fingerprint
--     Mc<hash>      completed for another request: the stored fingerprint
--
-- Completion, release and renewal are fenced by the owner token and the
-- in-progress status, and by no clock: an owner whose lease ran out still
-- owns the record until a claim takes it over. A renewal's lease is the
-- caller's time, stored as given; when it reaches past the record's
-- expires_at, expires_at follows, so that a run longer than the TTL is not
-- expired under its owner.
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($fn$
        CREATE FUNCTION %1$I.idempotency_key_claim(
            p_user_id uuid, p_key text, p_request_hash text, p_owner text,
            p_now timestamptz, p_lease_until timestamptz, p_expires_at timestamptz)
        RETURNS text
        LANGUAGE plpgsql
        SET enable_seqscan = off
        AS $body$
        DECLARE
            v_now    timestamptz := least(p_now, statement_timestamp());
            v_answer text;
        BEGIN
            FOR round IN 1..3 LOOP
                -- NULL when there is no record that counts as present (none,
                -- expired, or in progress with a lease that ran out); else
                -- the answer. The lookup is by the primary key alone.
                SELECT CASE
                        WHEN k.expires_at <= v_now OR (k.status = 'in_progress' AND k.lease_expires_at <= v_now) THEN NULL
                        WHEN k.request_hash <> p_request_hash THEN 'M' || left(k.status, 1) || k.request_hash
                        WHEN k.status = 'completed' THEN k.response_body::text
                        WHEN k.owner = p_owner THEN 'R'
                        ELSE 'P'
                    END
                INTO v_answer
                FROM %1$I.idempotency_keys k
                WHERE k.user_id = p_user_id AND k.key = p_key;
                IF v_answer IS NOT NULL THEN
                    RETURN v_answer;
                END IF;

                -- As in 0003: insert the claim, or take over the record that
                -- counts as absent; a concurrent claim's live record makes
                -- the WHERE false, and the next round reads it.
                INSERT INTO %1$I.idempotency_keys AS k
                    (key, user_id, request_hash, status, owner, lease_expires_at, created_at, expires_at)
                VALUES (p_key, p_user_id, p_request_hash, 'in_progress', p_owner, p_lease_until, p_now, p_expires_at)
                ON CONFLICT (user_id, key) DO UPDATE SET
                    request_hash     = excluded.request_hash,
                    status           = 'in_progress',
                    response_body    = NULL,
                    status_code      = NULL,
                    owner            = excluded.owner,
                    lease_expires_at = excluded.lease_expires_at,
                    created_at       = excluded.created_at,
                    expires_at       = excluded.expires_at
                WHERE k.expires_at <= v_now OR (k.status = 'in_progress' AND k.lease_expires_at <= v_now);
                IF FOUND THEN
                    RETURN 'C';
                END IF;
            END LOOP;
            RAISE EXCEPTION 'idempotency key %% of user %% kept changing during the claim', p_key, p_user_id
                USING ERRCODE = 'serialization_failure';
        END
        $body$;
    $fn$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($fn$
        -- Stores the response, fenced by the owner token and the in-progress
        -- status (not by the lease: an owner whose lease ran out may still
        -- complete while nobody has taken the record over). True when written.
        CREATE FUNCTION %1$I.idempotency_key_complete(
            p_user_id uuid, p_key text, p_owner text,
            p_response text, p_status_code integer, p_expires_at timestamptz)
        RETURNS boolean
        LANGUAGE plpgsql
        SET enable_seqscan = off
        AS $body$
        BEGIN
            UPDATE %1$I.idempotency_keys AS k SET
                status = 'completed', response_body = p_response::jsonb, status_code = p_status_code,
                lease_expires_at = NULL, expires_at = p_expires_at
            WHERE k.user_id = p_user_id AND k.key = p_key AND k.owner = p_owner AND k.status = 'in_progress';
            RETURN FOUND;
        END
        $body$;

        -- Deletes the in-progress record, fenced the same way. True when
        -- deleted.
        CREATE FUNCTION %1$I.idempotency_key_release(p_user_id uuid, p_key text, p_owner text)
        RETURNS boolean
        LANGUAGE plpgsql
        SET enable_seqscan = off
        AS $body$
        BEGIN
            DELETE FROM %1$I.idempotency_keys AS k
            WHERE k.user_id = p_user_id AND k.key = p_key AND k.owner = p_owner AND k.status = 'in_progress';
            RETURN FOUND;
        END
        $body$;
    $fn$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($fn$
        CREATE FUNCTION %1$I.idempotency_key_renew(
            p_user_id uuid, p_key text, p_owner text, p_lease_until timestamptz)
        RETURNS boolean
        LANGUAGE plpgsql
        SET enable_seqscan = off
        AS $body$
        BEGIN
            UPDATE %1$I.idempotency_keys AS k SET
                lease_expires_at = p_lease_until,
                expires_at = greatest(k.expires_at, p_lease_until)
            WHERE k.user_id = p_user_id AND k.key = p_key AND k.owner = p_owner AND k.status = 'in_progress';
            RETURN FOUND;
        END
        $body$;
    $fn$, current_schema());
END
$do$;
-- +goose StatementEnd
