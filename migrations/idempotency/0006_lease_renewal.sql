-- Lease renewal (docs/adr/0088): a run with no deadline of its own (a net/http
-- request, a long job) claims a short lease and renews it while it runs, so
-- that a crashed owner holds its key for one short lease rather than for the
-- longest one. One statement, one round trip, like the functions of 0003:
--
--     SELECT idempotency_key_renew(…)
--
-- Fenced by the owner token and the in-progress status, as the completion
-- is, and by no clock: an owner whose lease ran out still owns the record
-- until a claim takes it over (the claim judges that against the earlier of
-- the two clocks), and renewing it then is safe. The new lease is the
-- caller's time, stored as given; when it reaches past the record's
-- expires_at, expires_at follows, so that a run longer than the TTL is not
-- expired under its owner. True when renewed.

-- +goose Up
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
