-- The claim decides in its one read. Replaces idempotency_key_claim of
-- 0003_hot_path_functions.sql with a function of the same signature and the
-- same answers, whose primary-key read computes the answer itself (one value
-- into one variable instead of six into six, and no branches left to run in
-- PL/pgSQL on a replay), and whose replay answer is the stored envelope as it
-- is, without a copy behind a prefix:
--
--     C             claimed: the caller's record was written
--     R             reclaimed: the caller's own live claim of the same request
--     P             in progress, claimed by another invocation, same request
--     {…}           completed, same request: the stored response envelope
--     Mi<hash>      in progress for another request: the stored fingerprint
--     Mc<hash>      completed for another request: the stored fingerprint
--
-- (0003's replay answer was D<envelope>; the store reads both.) Everything
-- else stands as 0003 says: the SET enable_seqscan = off guard, the time
-- against the earlier of the caller's clock and the server's, at most three
-- rounds of read and insert.

-- +goose Up
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.idempotency_key_claim(
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
