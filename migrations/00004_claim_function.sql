-- The claim of the idempotency contract (spec §5.1) as one function, so that
-- the store's claim is one statement and one round trip:
--
--     SELECT … FROM idempotency_claim($key, $user, $hash, $owner, $now, $lease, $expires)
--
-- Why a function (ADR 0015): behind a transaction-pooling proxy (RDS Proxy,
-- pgbouncer) a client cannot keep named prepared statements, so every
-- statement it sends is planned again on every call. A function's own
-- statements are planned once per server connection and cached there, and
-- the call itself plans in microseconds; that lets the claim read first, so
-- that a replay, a 409 or a 422 writes and locks nothing, for less than the
-- cost of a bare upsert.
--
-- Every time comes from the caller ($now), never from now(), so that an
-- injected clock decides every expiry (ADR 0017). The table is named with
-- its schema, written in when the function is created, like the purge
-- procedure's (ADR 0003).

-- +goose Up
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($fn$
        CREATE FUNCTION %1$I.idempotency_claim(
            p_key text, p_user_id uuid, p_request_hash text, p_owner text,
            p_now timestamptz, p_lease_expires_at timestamptz, p_expires_at timestamptz)
        RETURNS SETOF %1$I.idempotency_keys
        LANGUAGE plpgsql
        AS $body$
        BEGIN
            -- A record that counts as present (not expired, and not an
            -- in-progress record whose lease ran out) is the answer as it is:
            -- a replay, a duplicate in progress, or a reused key.
            RETURN QUERY
                SELECT * FROM %1$I.idempotency_keys k
                WHERE k.user_id = p_user_id AND k.key = p_key
                  AND k.expires_at > p_now
                  AND (k.status = 'completed' OR k.lease_expires_at > p_now);
            IF FOUND THEN
                RETURN;
            END IF;

            -- None: insert the claim, or take over the record that counts as
            -- absent. The DO UPDATE has no WHERE on purpose, so that RETURNING
            -- always gives a row: when a concurrent claim inserted the key
            -- after the read above (its row was not in this statement's
            -- snapshot), ON CONFLICT waits for it to commit, locks the
            -- committed row and returns it; each CASE then keeps the old value,
            -- and the caller sees the winner's owner and fingerprint.
            RETURN QUERY
                INSERT INTO %1$I.idempotency_keys AS k
                    (key, user_id, request_hash, status, owner, lease_expires_at, created_at, expires_at)
                VALUES (p_key, p_user_id, p_request_hash, 'in_progress', p_owner, p_lease_expires_at, p_now, p_expires_at)
                ON CONFLICT (user_id, key) DO UPDATE SET
                    request_hash     = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN excluded.request_hash     ELSE k.request_hash     END,
                    status           = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN excluded.status           ELSE k.status           END,
                    response_body    = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN NULL                       ELSE k.response_body    END,
                    status_code      = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN NULL                       ELSE k.status_code      END,
                    owner            = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN excluded.owner            ELSE k.owner            END,
                    lease_expires_at = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN excluded.lease_expires_at ELSE k.lease_expires_at END,
                    created_at       = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN excluded.created_at       ELSE k.created_at       END,
                    expires_at       = CASE WHEN k.expires_at <= p_now OR (k.status = 'in_progress' AND k.lease_expires_at <= p_now) THEN excluded.expires_at       ELSE k.expires_at       END
                RETURNING k.*;
        END
        $body$;
    $fn$, current_schema());
END
$do$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idempotency_claim(text, uuid, text, text, timestamptz, timestamptz, timestamptz);
