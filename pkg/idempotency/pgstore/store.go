// Package pgstore keeps idempotency records in PostgreSQL, in the UNLOGGED
// table idempotency_keys, in a schema the user chooses. The key store has its
// own migrations: Migrate, or the plain SQL files of Migrations for another
// migration tool.
//
// Each Store method is one statement, one round trip, calling a PL/pgSQL
// function that the migrations create:
//
//   - Claim calls idempotency_key_claim: it returns the record that counts
//     as present, if there is one, without writing anything (a replay, a
//     409, a 422), and otherwise inserts the claim or takes over the record
//     that counts as absent. It returns only what the decorator needs: the
//     state, the stored fingerprint when it differs, the stored response.
//   - Complete calls idempotency_key_complete, an UPDATE fenced by the owner
//     token and the in-progress status.
//   - Release calls idempotency_key_release, a DELETE fenced the same way.
//   - Renew calls idempotency_key_renew, an UPDATE of the lease fenced the
//     same way.
//
// Takeover and expiry are decided against the earlier of the caller's clock
// (Claim.Now) and the server's. A caller whose clock runs ahead never takes
// over a lease that is live by the server's clock. One whose clock runs behind
// only takes over later. An injected clock set in the past still drives every
// branch. The stored times are the caller's.
//
// The statements keep no session state (no SET, no advisory locks, no
// SQL-level PREPARE) and work in every pgx query exec mode. The mode is the
// pool's business, and it decides the path; pgstore never changes it:
//
//   - Behind a transaction-pooling proxy (RDS Proxy, PgBouncer) the pool
//     uses QueryExecModeExec (dbpool's default) or another mode that names
//     no statement: each call is one round trip on the unnamed statement,
//     and the server plans the one-line call every time.
//   - On a direct connection the pool may keep named prepared statements
//     (QueryExecModeCacheStatement, pgx's default; dbpool.QueryModePrepared):
//     the claim is a prepared read that calls the claim function only on
//     a miss, and a replay takes about half the time and a quarter of the
//     server's (docs/performance.md, section 1f). The store then checks,
//     on each connection's first use, that the connection is a session of
//     its own on the server (see directPool.setUp). Through a pooler that
//     check fails, and every call fails with a permanent error before
//     anything is written, rather than a claim that succeeds by chance and
//     a completion that fails after the handler ran.
//
// A mode that prepares statements behind a proxy may also take a path the check
// does not cover: CompleteRunInTx on another pool, or the describe modes. There
// it meets SQLSTATE 26000 or 42P05. The store answers both as a permanent error
// too (see permanent).
//
// The schema is the only boundary between services: stores on one schema
// share its records, stores on two schemas share nothing. There is no key
// prefix; a record is named by its user id and key, both UUIDs.
//
// The response is kept in response_body (JSONB) as an envelope whose body is a
// JSON string, so that it replays byte for byte. The origin of a traced run is
// a member of its own.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/runctx"
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Schema is the schema that holds the key store, as Migrate (or the
	// migration files) created it there: its name as it is, unquoted (the
	// Store quotes it). Defaults to "", which follows the connection's
	// search_path (public in a deployment).
	Schema string

	// MaxRecordBytes is the largest response envelope (the JSON text of
	// the status, headers, body and origin that response_body keeps) that Complete
	// sends. A larger one is refused before anything is sent, with a
	// permanent *idemstore.Error wrapping idemstore.ErrTooLarge,
	// and the record is completed with the not-kept marker instead.
	// Defaults to 255 MiB (DefaultMaxRecordBytes), just under JSONB's
	// limit; values above it are lowered to it.
	MaxRecordBytes int
}

// DefaultMaxRecordBytes is the largest response envelope a Store sends by
// default: 255 MiB. A JSONB value, and each string in it, holds up to 256 MiB
// (2^28 - 1 bytes). The difference leaves room for the envelope's own members.
const DefaultMaxRecordBytes = 255 << 20

// Store is an idemstore.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	db        querier
	sql       statements
	maxRecord int
}

// querier is what a Store needs of a pool; a pgx.Tx has it too, which is how
// CompleteRunInTx shares the completion.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ idemstore.Store = (*Store)(nil)

// New returns a Store that keeps its records through pool. The pool's
// configuration (query exec mode, connection limits, authentication) is left as
// it is. Its query exec mode chooses the store's path (see the package
// documentation). QueryExecModeCacheStatement, pgx's default, is for a direct
// connection only. Behind a pooler, every call in that mode fails. It fails
// only when pool is nil.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: the pool is nil")
	}
	qualify := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	if opts != nil && opts.Schema != "" {
		qualify = func(name string) string { return pgx.Identifier{opts.Schema, name}.Sanitize() }
	}
	maxRecord := DefaultMaxRecordBytes
	if opts != nil && opts.MaxRecordBytes > 0 && opts.MaxRecordBytes < maxRecord {
		maxRecord = opts.MaxRecordBytes
	}
	st := &Store{db: pool, sql: newStatements(qualify), maxRecord: maxRecord}
	if pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		st.db = directPool{Pool: pool, claim: st.sql.claimDirect, planned: plannedKey + st.sql.claimDirect}
	}
	return st, nil
}

// directPool is the Store's pool when it prepares statements: pgx's
// QueryExecModeCacheStatement, its default, or dbpool.QueryModePrepared. Each
// statement runs on a connection shown to be a session of its own on the
// server. A Store checks that on the connection's first use. So no claim is
// made through a connection pooler that would lose the statements the
// completion needs. The Admin methods, which are not on the hot path, use the
// pool as it is.
type directPool struct {
	*pgxpool.Pool
	claim string // the claim's statement, planned by setUp
	// planned is plannedKey followed by claim, made once: not per call.
	planned string
}

func (d directPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := d.Acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	if err := d.setUp(ctx, c.Conn()); err != nil {
		c.Release()
		return errRow{err}
	}
	return &releasingRow{row: c.QueryRow(ctx, sql, args...), conn: c}
}

// releasingRow gives its connection back to the pool once scanned, as the
// pool's own QueryRow does.
type releasingRow struct {
	row  pgx.Row
	conn *pgxpool.Conn
}

func (r *releasingRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	r.conn.Release()
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBehindPooler is the permanent failure of a Store whose pool prepares
// statements on connections that go through a connection pooler.
var errBehindPooler = errors.New("the pool prepares statements (pgx's QueryExecModeCacheStatement, its default, or dbpool.QueryModePrepared), which only a direct connection to PostgreSQL keeps, but its connections go through a connection pooler (RDS Proxy, PgBouncer): use QueryExecModeExec (dbpool.QueryModeExec, dbpool's default) behind a pooler")

// directKey is where a connection keeps setUp's verdict on it, and
// plannedKey, followed by a claim statement, that the statement's plan
// was made (a claim statement per schema).
const (
	directKey  = "github.com/ichido/ichido/pkg/idempotency/pgstore.direct"
	plannedKey = "github.com/ichido/ichido/pkg/idempotency/pgstore.planned "
)

// setUp readies conn, on its first use by a Store, and keeps the verdict
// with it, either way: a connection through a pooler fails every time,
// before anything is written.
//
// First it checks that conn is a session of its own on the server: the
// backend the server names (pg_backend_pid) is the one that greeted the
// connection (its BackendKeyData). A pooler greets its clients itself,
// with a key of its own, and passes their statements to backends it
// shares among them.
//
// Then it prepares the claim and has the server make its generic plan at
// once, with sequential scans off, inside a transaction that it rolls
// back (the claim of a key nobody uses, never kept). The claim is a plain
// statement whose plan the server keeps: made the usual way, on a table
// that is empty or nearly so, after an ANALYZE, or in the first minutes
// after a crash emptied the UNLOGGED table while its statistics still
// describe it full, that plan would be a sequential scan, and it would be
// kept while the table grows (ADR 0025). Made now, it is the primary-key
// index, which PostgreSQL keeps; on a table that small it plans each
// call afresh instead, until the index plan is the cheaper one. A plan
// the server makes again later, after an invalidation, is made on the
// table as it is then, which autovacuum's next ANALYZE describes.
func (d directPool) setUp(ctx context.Context, conn *pgx.Conn) error {
	data := conn.PgConn().CustomData()
	direct, known := data[directKey].(bool)
	if known && !direct {
		return errBehindPooler
	}
	if known && data[d.planned] != nil {
		return nil
	}
	if !known {
		var pid uint32
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
			return err
		}
		direct = pid == conn.PgConn().PID()
		data[directKey] = direct
		if !direct {
			return errBehindPooler
		}
	}
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SELECT set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`)
	now := time.Now()
	b.Queue(d.claim, planUser, planKey, "", "plan", now, now, now)
	b.Queue(`ROLLBACK`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("preparing the claim: %w", err)
	}
	data[d.planned] = true
	return nil
}

// planUser and planKey name the record that setUp claims in a transaction it
// rolls back, so that nothing of it is ever kept. No user is given these ids: a
// derived id is a hash, never this one. No client sends them, since they are
// not version 4 UUIDs.
const (
	planUser = "00000000-0000-8000-8000-000000000000"
	planKey  = "00000000-0000-8000-8000-000000000000"
)

// statements holds the store's statements, with the schema filled in.
type statements struct {
	claim, complete, release, renew string
	// claimDirect is the claim on a direct connection: the replay's read
	// as a plain statement, and the claim function only when the read
	// finds no record that counts as present.
	claimDirect string
	// table is the key table's qualified name, for the Admin methods.
	table string
}

// The statements cast every parameter, so that each mode (the exec mode
// takes parameter types from the Go values, the simple protocol sends text)
// resolves the same function.
func newStatements(qualify func(string) string) statements {
	return statements{
		claim: `SELECT ` + qualify("idempotency_key_claim") +
			`($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz, $6::timestamptz, $7::timestamptz)`,
		complete: `SELECT ` + qualify("idempotency_key_complete") +
			`($1::uuid, $2::text, $3::text, $4::text, $5::integer, $6::timestamptz)`,
		// The read answers as the claim function's first lookup does (see
		// the migration), from the same record, with the same clock; when it
		// answers NULL (no record, or one that counts as absent) coalesce
		// calls the function, which reads again and claims.
		claimDirect: `SELECT coalesce((SELECT CASE
			WHEN k.expires_at <= least($5::timestamptz, statement_timestamp()) OR (k.status = 'in_progress' AND k.lease_expires_at <= least($5::timestamptz, statement_timestamp())) THEN NULL
			WHEN k.request_hash <> $3::text THEN 'M' || left(k.status, 1) || k.request_hash
			WHEN k.status = 'completed' THEN k.response_body::text
			WHEN k.owner = $4::text THEN 'R'
			ELSE 'P' END
			FROM ` + qualify("idempotency_keys") + ` k WHERE k.user_id = $1::uuid AND k.key = $2::text), ` +
			qualify("idempotency_key_claim") + `($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz, $6::timestamptz, $7::timestamptz))`,
		release: `SELECT ` + qualify("idempotency_key_release") + `($1::uuid, $2::text, $3::text)`,
		renew:   `SELECT ` + qualify("idempotency_key_renew") + `($1::uuid, $2::text, $3::text, $4::timestamptz)`,
		table:   qualify("idempotency_keys"),
	}
}

// Claim implements idemstore.Store. When the record is not claimed, the
// returned Record holds Status and Fingerprint. It holds the Response of a
// completed record of the same request (the replay). Its Owner and times are
// left zero, as the decorator does not need them.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	if err := idemstore.CheckIDs(c.UserID, c.Key); err != nil {
		return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
	}
	claim := s.sql.claim
	if _, direct := s.db.(directPool); direct {
		claim = s.sql.claimDirect
	}
	user, err := uuid.Parse(c.UserID) // an id (CheckIDs): a UUID's canonical text
	if err != nil {
		return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
	}
	call := claimCalls.Get().(*claimCall)
	call.set(c, user)
	err = s.db.QueryRow(ctx, claim, call.args[:]...).Scan(&call.answer)
	answer := call.answer
	call.reset()
	claimCalls.Put(call)
	if err != nil {
		return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
	}
	rec := idemstore.Record{UserID: c.UserID, Key: c.Key, Fingerprint: c.Fingerprint, Status: idemstore.StatusInProgress}
	// The answer's first character says what the function found; see the
	// claim function in the key store's migration.
	switch {
	case answer == "C":
		rec.Owner = c.Owner
		rec.CreatedAt, rec.LeaseUntil, rec.ExpiresAt = micro(c.Now), micro(c.LeaseUntil), micro(c.ExpiresAt)
		return idemstore.ClaimResult{Claimed: true, Record: rec}, nil
	case answer == "R":
		rec.Owner = c.Owner
		return idemstore.ClaimResult{Claimed: true, Record: rec}, nil
	case answer == "P":
	case strings.HasPrefix(answer, "{"):
		// The stored envelope.
		rec.Status = idemstore.StatusCompleted
		if rec.Response, err = decodeEnvelope(answer); err != nil {
			return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
		}
	case strings.HasPrefix(answer, "Mi"), strings.HasPrefix(answer, "Mc"):
		if answer[1] == 'c' {
			rec.Status = idemstore.StatusCompleted
		}
		rec.Fingerprint = answer[2:]
	default:
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Permanent: true,
			Err: fmt.Errorf("the claim function returned %.20q, which this version does not know", answer)}
	}
	return idemstore.ClaimResult{Record: rec}, nil
}

// claimCall holds a claim's arguments and its answer. pgx takes its
// arguments as values of type any: a string or a time put there is copied
// to the heap on every call, and a pointer to a string is read through
// reflection, which copies it too. A pointer to a pgtype value of a pooled
// claimCall is encoded as it is.
type claimCall struct {
	user                pgtype.UUID
	key, hash, owner    pgtype.Text
	now, lease, expires pgtype.Timestamptz
	answer              string
	// args points at the fields above, in the statements' order.
	args [7]any
}

var claimCalls = sync.Pool{New: func() any {
	c := &claimCall{}
	c.args = [7]any{&c.user, &c.key, &c.hash, &c.owner, &c.now, &c.lease, &c.expires}
	return c
}}

// set fills c with claim's arguments, user being claim.UserID read.
func (c *claimCall) set(claim idemstore.Claim, user [16]byte) {
	c.user = pgtype.UUID{Bytes: user, Valid: true}
	c.key = pgtype.Text{String: claim.Key, Valid: true}
	c.hash = pgtype.Text{String: claim.Fingerprint, Valid: true}
	c.owner = pgtype.Text{String: claim.Owner, Valid: true}
	c.now, c.lease, c.expires = timestamptz(claim.Now), timestamptz(claim.LeaseUntil), timestamptz(claim.ExpiresAt)
}

// reset empties c for the pool, keeping nothing of the call.
func (c *claimCall) reset() { *c = claimCall{args: c.args} }

// timestamptz is t as a timestamptz argument. pgx encodes a time.Time
// through a wrapper it allocates; this value needs none, and encodes alike.
func timestamptz(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: true} }

// micro is t as PostgreSQL keeps it: microseconds, UTC.
func micro(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

// Complete implements idemstore.Store. The update is fenced by the owner token
// and the in-progress status, not by the lease. An owner whose lease ran out
// may still complete while nobody has taken the record over. Completion.Now is
// not consulted.
func (s *Store) Complete(ctx context.Context, c idemstore.Completion) error {
	return s.complete(ctx, s.db, c)
}

// CompleteRunInTx completes the run's record inside tx, the caller's own
// transaction. So the record is completed if and only if tx commits. There is
// no moment at which the work is committed but the key is still in progress. It
// is called inside a handler run by idempotency.Wrap or Middleware, with the
// response it is about to return (one of idempotency.AnyResponse) as result. Or
// it is called inside a function run by idempotency.Function or SQSHandler,
// with its result. The engine then does not complete the record itself.
//
//	if _, err := store.CompleteRunInTx(ctx, tx, resp); err != nil {
//		return rollbackAndFail(err) // ErrLeaseLost: another invocation owns the key
//	}
//	if err := tx.Commit(ctx); err != nil { ... return the error }
//	return resp, nil
//
// It reports false and writes nothing when there is nothing to complete. That
// is outside such a run, after idempotency.DoNotStore, or for a response that
// is not stored. It is also when the run's completion was taken before. It
// fails, writing nothing, when s is not the Store the run was claimed with (tx
// must be on that Store's database too). It is fenced like Complete. On
// idemstore.ErrLeaseLost another invocation owns the key, and nothing was
// written to the record. On any error the caller rolls tx back and fails, and
// the engine releases the record. A handler that then answers with another
// response than the one it completed is refused with 500
// idempotency_response_mismatch.
func (s *Store) CompleteRunInTx(ctx context.Context, tx pgx.Tx, result any) (bool, error) {
	_, c, ok, err := s.takeCompletion(ctx, result)
	if err != nil || !ok {
		return false, err
	}
	if err := s.complete(ctx, tx, c); err != nil {
		return false, err
	}
	return true, nil
}

// CompleteRunInBatch is CompleteRunInTx in a batch: it queues the run's
// completion on b, the batch that holds the caller's own writes. A batch sent
// outside an explicit transaction (pool.SendBatch) runs in one implicit
// transaction. So the writes and the completion commit together in the batch's
// one round trip. A statement of the batch that fails rolls back both. It is
// for a handler whose response is known before its writes are sent (ids and
// times made by the handler).
//
// It reports false and queues nothing when there is nothing to complete (as
// CompleteRunInTx). It fails and queues nothing when s is not the run's Store,
// when result is not of the run's kind, or when the response is larger than the
// store keeps. Otherwise it returns done, to be called once the batch's results
// have been read (BatchResults.Close). done returns:
//   - nil when the completion was written.
//   - idemstore.ErrLeaseLost when the record is no longer the run's. Nothing
//     was written to it, but the batch's other statements did commit.
//   - A *idemstore.Error when the completion failed or did not run. The batch
//     rolled back, and the completion is given back to the engine. The engine
//     completes or releases the record itself when the handler returns. The
//     handler may answer otherwise then.
func (s *Store) CompleteRunInBatch(ctx context.Context, b *pgx.Batch, result any) (done func(ctx context.Context) error, ok bool, err error) {
	run, c, ok, err := s.takeCompletion(ctx, result)
	if err != nil || !ok {
		return nil, false, err
	}
	env, err := s.envelope(c)
	if err != nil {
		run.ReturnCompletion()
		return nil, false, err
	}
	var written, ran bool
	var scanErr error
	b.Queue(s.sql.complete, c.UserID, c.Key, c.Owner, env, c.Response.StatusCode, c.ExpiresAt).QueryRow(func(row pgx.Row) error {
		ran = true
		scanErr = row.Scan(&written)
		return scanErr
	})
	return func(ctx context.Context) error {
		switch {
		case scanErr != nil:
			run.ReturnCompletion()
			return storeError(ctx, "complete", scanErr)
		case !ran:
			run.ReturnCompletion()
			return storeError(ctx, "complete", errors.New("the batch ended before the completion ran"))
		case !written:
			return idemstore.ErrLeaseLost
		}
		return nil
	}, true, nil
}

// takeCompletion takes the completion of the run ctx belongs to, for a
// write by s in its caller's transaction; ok is false when there is none
// to take.
func (s *Store) takeCompletion(ctx context.Context, result any) (run runctx.Run, c idemstore.Completion, ok bool, err error) {
	run, ok = runctx.From(ctx)
	if !ok {
		return nil, idemstore.Completion{}, false, nil
	}
	c, ok, err = run.TakeCompletion(s, result)
	return run, c, ok, err
}

// envelope encodes c's response as response_body keeps it, within the
// store's largest record.
func (s *Store) envelope(c idemstore.Completion) (string, error) {
	env, err := encodeEnvelope(c.Response)
	if err != nil {
		// The response itself is at fault: sending it again cannot help.
		return "", &idemstore.Error{Op: "complete", Permanent: true, Err: err}
	}
	if len(env) > s.maxRecord {
		return "", &idemstore.Error{Op: "complete", Permanent: true, Err: fmt.Errorf(
			"%w: the envelope is %d bytes, the most this store keeps is %d (Options.MaxRecordBytes)", idemstore.ErrTooLarge, len(env), s.maxRecord)}
	}
	return env, nil
}

func (s *Store) complete(ctx context.Context, db querier, c idemstore.Completion) error {
	if err := idemstore.CheckIDs(c.UserID, c.Key); err != nil {
		return storeError(ctx, "complete", err)
	}
	env, err := s.envelope(c)
	if err != nil {
		return err
	}
	var written bool
	if err := db.QueryRow(ctx, s.sql.complete, c.UserID, c.Key, c.Owner, env, c.Response.StatusCode, c.ExpiresAt).Scan(&written); err != nil {
		return storeError(ctx, "complete", err)
	}
	if !written {
		return idemstore.ErrLeaseLost
	}
	return nil
}

// Release implements idemstore.Store.
func (s *Store) Release(ctx context.Context, r idemstore.Ref) error {
	if err := idemstore.CheckIDs(r.UserID, r.Key); err != nil {
		return storeError(ctx, "release", err)
	}
	var deleted bool
	if err := s.db.QueryRow(ctx, s.sql.release, r.UserID, r.Key, r.Owner).Scan(&deleted); err != nil {
		return storeError(ctx, "release", err)
	}
	if !deleted {
		return idemstore.ErrLeaseLost
	}
	return nil
}

// Renew implements idemstore.Store: the lease (and expires_at, when the
// lease reaches past it) of the caller's in-progress record moves to
// r.LeaseUntil. Renewal.Now is not consulted.
func (s *Store) Renew(ctx context.Context, r idemstore.Renewal) error {
	if err := idemstore.CheckIDs(r.UserID, r.Key); err != nil {
		return storeError(ctx, "renew", err)
	}
	var renewed bool
	if err := s.db.QueryRow(ctx, s.sql.renew, r.UserID, r.Key, r.Owner, r.LeaseUntil).Scan(&renewed); err != nil {
		return storeError(ctx, "renew", err)
	}
	if !renewed {
		return idemstore.ErrLeaseLost
	}
	return nil
}

// storeError is the one place where a driver error becomes a
// *idemstore.Error. A cancelled or expired context stays visible to
// errors.Is, and the failures an operator can act on get a message that says
// what to do. The failures no retry can cure are marked Permanent
// (permanent): missing privileges and objects, failed authentication, a
// pool whose prepared statements a connection pooler loses.
func storeError(ctx context.Context, op string, err error) error {
	ctxErr := ctx.Err()
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn, pgerrcode.UndefinedFunction, pgerrcode.InvalidSchemaName:
			err = fmt.Errorf("the idempotency table or its functions are missing or outdated (apply the key store's migrations: pgstore.Migrate): %w", err)
		case pgerrcode.InsufficientPrivilege:
			err = fmt.Errorf("the database role lacks a privilege on the idempotency table or its functions (grant EXECUTE on the functions and SELECT, INSERT, UPDATE, DELETE on idempotency_keys, and USAGE on the schema): %w", err)
		case pgerrcode.InvalidPassword, pgerrcode.InvalidAuthorizationSpecification:
			err = fmt.Errorf("the database refused the credentials: %w", err)
		case pgerrcode.InvalidCatalogName:
			err = fmt.Errorf("the database does not exist: %w", err)
		case pgerrcode.ReadOnlySQLTransaction:
			err = fmt.Errorf("the server is read-only; the idempotency table lives on the writer: %w", err)
		case pgerrcode.InvalidSQLStatementName, pgerrcode.DuplicatePreparedStatement:
			err = fmt.Errorf("the pool's prepared statements do not survive its connection pooler (a transaction-pooling proxy, such as RDS Proxy or PgBouncer, with a pgx mode that prepares statements): use QueryExecModeExec, as dbpool does: %w", err)
		}
	}
	return &idemstore.Error{Op: op, Err: err, Permanent: ctxErr == nil && (permanent(pgErr) || errors.Is(err, errBehindPooler) || errors.Is(err, idemstore.ErrNotID))}
}

// permanent reports whether a server error is one that repeating the
// statement cannot cure: class 28 (authentication), class 42 (privileges,
// undefined objects, statements this schema does not match), 3D000 (no such
// database) and 3F000 (no such schema). A read-only server is transient: it
// is what a writer looks like during an Aurora failover.
//
// 26000 (no such prepared statement) and 42P05 (a prepared statement of
// that name exists) are permanent too, as one class: both come from a pool
// whose mode prepares statements (pgx's statement cache, or the two round
// trips of its describe mode) behind a transaction-pooling proxy that moves
// the client between server connections. pgx forgets a statement that
// failed and prepares it again on its next use, so a retry may pass, but
// the next move of the client fails again: the fault is the deployment's,
// and it must answer as misconfigured every time, not as 500 or 503 by
// chance. Neither happens to a pool in a mode that names no statement
// (QueryExecModeExec, the simple protocol), nor to a statement cache on a
// direct connection, which is the client's alone.
func permanent(pgErr *pgconn.PgError) bool {
	if pgErr == nil {
		return false
	}
	switch {
	case pgerrcode.IsInvalidAuthorizationSpecification(pgErr.Code),
		pgerrcode.IsSyntaxErrororAccessRuleViolation(pgErr.Code), // 42P05 among them
		pgErr.Code == pgerrcode.InvalidSQLStatementName,
		pgErr.Code == pgerrcode.InvalidCatalogName,
		pgErr.Code == pgerrcode.InvalidSchemaName:
		return true
	}
	return false
}
