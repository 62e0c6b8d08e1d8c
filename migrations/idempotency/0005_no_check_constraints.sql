-- The key table keeps no CHECK constraints (docs/adr/0029).
--
-- PostgreSQL turns a table's CHECK constraints into executable expressions
-- afresh in every statement that writes the table: each one is read back from
-- its stored text, simplified and compiled, before the row is checked. For the
-- five constraints 0001 declared, that was about 20 µs of a claim's insert and
-- as much of a completion's update, a fifth of a first request's server time.
-- What they guarded is kept by the only writers there are, the functions of
-- 0003 and 0004 (and the purge, which only deletes): they write a status of
-- 'in_progress' with a lease and no response, or 'completed' with a response
-- and a status code and no lease. The status code of a stored response comes
-- from the decorator, which stores 2xx to 4xx only, and the key is the
-- caller's (the decorator accepts UUIDs only). NOT NULL stays: it costs
-- nothing of the kind.

-- +goose Up
ALTER TABLE idempotency_keys
    DROP CONSTRAINT IF EXISTS idempotency_keys_key_check,
    DROP CONSTRAINT IF EXISTS idempotency_keys_status_check,
    DROP CONSTRAINT IF EXISTS idempotency_keys_status_code_check,
    DROP CONSTRAINT IF EXISTS idempotency_keys_completed_has_response,
    DROP CONSTRAINT IF EXISTS idempotency_keys_in_progress_has_lease;
