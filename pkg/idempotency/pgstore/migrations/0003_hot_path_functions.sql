-- The store's three operations as functions, so that each is one statement
-- and one round trip, and so that their inner statements are planned once
-- per server connection and cached there (docs/adr/0025):
--
--     SELECT idempotency_key_claim(…)
--     SELECT idempotency_key_complete(…)
--     SELECT idempotency_key_release(…)
--
-- Behind a transaction-pooling proxy a client cannot keep named prepared
-- statements, so everything it sends is parsed and planned again on every
-- call; a function call plans in a few microseconds, and the statements
-- inside it run on cached plans.
--
-- SET enable_seqscan = off: a cached plan is built once and kept. Planned
-- while the table was analysed empty (a fresh deploy, a table the purge
-- emptied), the cheapest plan for a primary-key lookup is a sequential scan,
-- and that plan would stay cached on the server connection as the table
-- fills, reading every page on every call until the next ANALYZE. With
-- sequential scans disabled inside these functions every plan is the
-- primary-key index, whatever the statistics said when it was built.
--
-- Time: takeover and expiry are decided against the earlier of the caller's
-- clock (p_now) and the server's (statement_timestamp()). A caller whose
-- clock runs ahead cannot take over a lease that is live by the server's
-- clock; a caller whose clock runs behind only takes over later. A test
-- drives every branch with an injected clock set in the past.
--
-- The claim returns only what the caller needs, as one text value (a single
-- scalar costs the server less than a row): its first character says what
-- was found, and the rest carries the one thing that goes with it.
--
--     C             claimed: the caller's record was written
--     R             reclaimed: the caller's own live claim of the same request
--     P             in progress, claimed by another invocation, same request
--     D<response>   completed, same request: the stored response envelope
--     Mi<hash>      in progress for another request: the stored fingerprint
--     Mc<hash>      completed for another request: the stored fingerprint
--
-- Tables and functions are named with their schema, written in when the
-- functions are created (the schema these migrations are applied in).

-- +goose Up
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
            v_now      timestamptz := least(p_now, statement_timestamp());
            v_status   text;
            v_hash     text;
            v_owner    text;
            v_lease    timestamptz;
            v_expires  timestamptz;
            v_response text;
        BEGIN
            -- At most three rounds: a round ends early only when a
            -- concurrent claim wrote the key between the read and the insert
            -- and then released it again before the next read.
            FOR round IN 1..3 LOOP
                -- A record that counts as present (not expired, and not an
                -- in-progress record whose lease ran out) is the answer as it
                -- is: a replay, a duplicate in progress, or a reused key. The
                -- lookup is by the primary key alone, and the times are
                -- compared here, so that no plan can prefer the expires_at
                -- index for them.
                SELECT k.status, k.request_hash, k.owner, k.lease_expires_at, k.expires_at, k.response_body::text
                INTO v_status, v_hash, v_owner, v_lease, v_expires, v_response
                FROM %1$I.idempotency_keys k
                WHERE k.user_id = p_user_id AND k.key = p_key;
                IF FOUND AND v_expires > v_now AND (v_status = 'completed' OR v_lease > v_now) THEN
                    IF v_hash <> p_request_hash THEN
                        RETURN 'M' || left(v_status, 1) || v_hash;
                    ELSIF v_status = 'completed' THEN
                        RETURN 'D' || v_response;
                    ELSIF v_owner = p_owner THEN
                        -- The owner repeating its own claim (a lost reply)
                        -- holds the record again, for the same request only.
                        RETURN 'R';
                    END IF;
                    RETURN 'P';
                END IF;

                -- None: insert the claim, or take over the record that counts
                -- as absent. When a concurrent claim inserted the key after
                -- the read above, ON CONFLICT waits for it to commit and the
                -- WHERE finds its record live: nothing is written, and the
                -- next round reads that record.
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
