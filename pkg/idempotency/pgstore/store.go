// Package pgstore keeps idempotency records in PostgreSQL, in the UNLOGGED
// table idempotency_keys of ADR 009 (see migrations/00002_idempotency_keys.sql).
//
// Each Store method is one statement, one round trip:
//
//   - Claim calls the function idempotency_claim (migrations/00004): it
//     returns the record that counts as present, if there is one, without
//     writing anything (a replay, a 409, a 422), and otherwise inserts the
//     claim with an INSERT … ON CONFLICT DO UPDATE that takes over an expired
//     record and always returns the row that now holds the key, including a
//     row that a concurrent claim committed while this one waited.
//   - Complete is an UPDATE fenced by the owner token and the in-progress
//     status.
//   - Release is a DELETE fenced the same way.
//
// Every time the statements compare against is the caller's (Claim.Now and
// the times derived from it), never the server's now(), so an injected clock
// drives every expiry branch.
//
// The statements keep no session state (no SET, no advisory locks, no
// SQL-level PREPARE) and work in every pgx query exec mode, so the pool may
// use QueryExecModeExec or QueryExecModeSimpleProtocol to go through a
// transaction-pooling proxy (RDS Proxy, PgBouncer). The mode is the pool's
// business: pgstore never changes it.
//
// The response is kept in response_body (JSONB) as an envelope whose body is
// a JSON string, so that it replays byte for byte; see docs/adr.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/idempotency"
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Schema is the schema that holds the idempotency_keys table and the
	// idempotency_claim function, as the migrations create them there.
	// Defaults to "", which follows the connection's search_path (public in
	// a deployment).
	Schema string
}

// Store is an idempotency.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	db  querier
	sql statements
}

// querier is what a Store needs of a pool; a pgx.Tx has it too, which is how
// CompleteInTx shares the UPDATE.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ idempotency.Store = (*Store)(nil)

// New returns a Store that keeps its records through pool. The pool's
// configuration (query exec mode, connection limits, authentication) is
// left as it is.
func New(pool *pgxpool.Pool, opts *Options) *Store {
	qualify := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	if opts != nil && opts.Schema != "" {
		qualify = func(name string) string { return pgx.Identifier{opts.Schema, name}.Sanitize() }
	}
	return &Store{db: pool, sql: newStatements(qualify("idempotency_keys"), qualify("idempotency_claim"))}
}

// statements holds the three statements, with the table name filled in.
type statements struct {
	claim, complete, release string
}

// recordColumns are the columns a claim returns, in the order scanRecord
// reads them.
const recordColumns = `k.key, k.user_id::text, k.request_hash, k.status, k.response_body::text,
	k.status_code, k.owner, k.lease_expires_at, k.created_at, k.expires_at`

func newStatements(table, claim string) statements {
	return statements{
		// One statement, one round trip; see migrations/00004 for why the
		// claim is a function, and ADR 0015.
		claim: `SELECT ` + recordColumns + ` FROM ` + claim + `($1::text, $2::uuid, $3::text, $4::text,
	$5::timestamptz, $6::timestamptz, $7::timestamptz) AS k`,

		// Fenced by owner and status only: a lease that ran out without
		// anybody taking the record over still lets its owner complete it,
		// since nobody else has run the request.
		complete: `UPDATE ` + table + ` AS k SET
	status = 'completed', response_body = $4::jsonb, status_code = $5::integer,
	lease_expires_at = NULL, expires_at = $6::timestamptz
WHERE k.user_id = $1::uuid AND k.key = $2::text AND k.owner = $3::text AND k.status = 'in_progress'`,

		release: `DELETE FROM ` + table + ` AS k
WHERE k.user_id = $1::uuid AND k.key = $2::text AND k.owner = $3::text AND k.status = 'in_progress'`,
	}
}

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, c idempotency.Claim) (idempotency.ClaimResult, error) {
	row := s.db.QueryRow(ctx, s.sql.claim, c.Key, c.UserID, c.RequestHash, c.Owner, c.Now, c.LeaseUntil, c.ExpiresAt)
	rec, err := scanRecord(row)
	if err != nil {
		return idempotency.ClaimResult{}, storeError(ctx, "claim", err)
	}
	return idempotency.ClaimResult{
		Claimed: rec.Owner == c.Owner && rec.Status == idempotency.StatusInProgress,
		Record:  rec,
	}, nil
}

// Complete implements idempotency.Store. The update is fenced by the owner
// token and the in-progress status, not by the lease: an owner whose lease
// ran out may still complete while nobody has taken the record over.
// Completion.Now is not consulted.
func (s *Store) Complete(ctx context.Context, c idempotency.Completion) error {
	return s.complete(ctx, s.db, c)
}

// CompleteInTx is Complete run inside tx, the transaction that holds a
// handler's own writes (spec: atomic completion). The record is completed
// if and only if tx commits, so there is no moment at which the work is
// committed but the key still in progress. It is fenced like Complete: on
// ErrLeaseLost another invocation owns the key, nothing was written to the
// record, and the caller should roll tx back so that its work is not
// committed twice. On a *StoreError the transaction is unusable and must be
// rolled back too.
//
// The record must have been claimed by c.Owner beforehand (Store.Claim);
// tx must be on the same database as the Store's pool.
func (s *Store) CompleteInTx(ctx context.Context, tx pgx.Tx, c idempotency.Completion) error {
	return s.complete(ctx, tx, c)
}

func (s *Store) complete(ctx context.Context, db querier, c idempotency.Completion) error {
	env, err := encodeEnvelope(c.Response)
	if err != nil {
		return &idempotency.StoreError{Op: "complete", Err: err}
	}
	tag, err := db.Exec(ctx, s.sql.complete, c.UserID, c.Key, c.Owner, env, c.Response.StatusCode, c.ExpiresAt)
	if err != nil {
		return storeError(ctx, "complete", err)
	}
	if tag.RowsAffected() == 0 {
		return idempotency.ErrLeaseLost
	}
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, r idempotency.Ref) error {
	tag, err := s.db.Exec(ctx, s.sql.release, r.UserID, r.Key, r.Owner)
	if err != nil {
		return storeError(ctx, "release", err)
	}
	if tag.RowsAffected() == 0 {
		return idempotency.ErrLeaseLost
	}
	return nil
}

func scanRecord(row pgx.Row) (idempotency.Record, error) {
	var (
		rec        idempotency.Record
		status     string
		body       *string
		statusCode *int32
		lease      *time.Time
	)
	if err := row.Scan(&rec.Key, &rec.UserID, &rec.RequestHash, &status, &body, &statusCode,
		&rec.Owner, &lease, &rec.CreatedAt, &rec.ExpiresAt); err != nil {
		return idempotency.Record{}, err
	}
	rec.Status = idempotency.Status(status)
	rec.CreatedAt = rec.CreatedAt.UTC()
	rec.ExpiresAt = rec.ExpiresAt.UTC()
	if lease != nil {
		rec.LeaseUntil = lease.UTC()
	}
	if body != nil {
		resp, err := decodeEnvelope([]byte(*body))
		if err != nil {
			return idempotency.Record{}, err
		}
		if statusCode != nil {
			resp.StatusCode = int(*statusCode)
		}
		rec.Response = resp
	}
	return rec, nil
}

// storeError is the one place where a driver error becomes a
// *idempotency.StoreError. A cancelled or expired context stays visible to
// errors.Is, and the failures an operator can act on get a message that says
// what to do.
func storeError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn, pgerrcode.UndefinedFunction, pgerrcode.InvalidSchemaName:
			err = fmt.Errorf("the idempotency table or its claim function is missing or outdated (apply the migrations): %w", err)
		case pgerrcode.ReadOnlySQLTransaction:
			err = fmt.Errorf("the server is read-only; the idempotency table lives on the writer: %w", err)
		}
	}
	return &idempotency.StoreError{Op: op, Err: err}
}
