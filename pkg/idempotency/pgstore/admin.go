package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ idemstore.Admin = (*Store)(nil)

// admin is what the Admin methods need of the pool.
type admin interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// recordColumns are the columns a Record is read from, in scanRecord's
// order.
const recordColumns = `user_id::text, key, owner, request_hash, status, response_body::text, created_at, lease_expires_at, expires_at`

// Get implements idemstore.Admin: one SELECT by the primary key. Expiry
// is judged by the server's clock. The database user needs SELECT on the
// table (Grants gives it).
func (s *Store) Get(ctx context.Context, userID, key string) (idemstore.Record, bool, error) {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return idemstore.Record{}, false, storeError(ctx, "get", err)
	}
	recs, err := s.query(ctx, "get", `SELECT `+recordColumns+` FROM `+s.sql.table+
		` WHERE user_id = $1::uuid AND key = $2::text AND expires_at > now()`, userID, key)
	if err != nil || len(recs) == 0 {
		return idemstore.Record{}, false, err
	}
	return recs[0], true, nil
}

// List implements idemstore.Admin: one SELECT, by the primary key's
// prefix when q names a user, else a scan of the table.
func (s *Store) List(ctx context.Context, q idemstore.ListQuery) ([]idemstore.Record, error) {
	if q.UserID != "" && !idemstore.IsID(q.UserID) {
		return nil, storeError(ctx, "list", fmt.Errorf("the user id %.80q is %w", q.UserID, idemstore.ErrNotID))
	}
	where := []string{"expires_at > now()"}
	var args []any
	if q.UserID != "" {
		args = append(args, q.UserID)
		where = append(where, "user_id = $"+strconv.Itoa(len(args))+"::uuid")
	}
	if q.Status != "" {
		args = append(args, string(q.Status))
		where = append(where, "status = $"+strconv.Itoa(len(args))+"::text")
	}
	args = append(args, q.Limited())
	return s.query(ctx, "list", `SELECT `+recordColumns+` FROM `+s.sql.table+
		` WHERE `+strings.Join(where, " AND ")+
		` ORDER BY created_at DESC, user_id, key LIMIT $`+strconv.Itoa(len(args))+`::integer`, args...)
}

// Delete implements idemstore.Admin: one DELETE by the primary key,
// whatever the record's state or owner.
func (s *Store) Delete(ctx context.Context, userID, key string) (bool, error) {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return false, storeError(ctx, "delete", err)
	}
	db, ok := s.db.(admin)
	if !ok {
		return false, storeError(ctx, "delete", errors.New("the store's connection cannot run queries"))
	}
	tag, err := db.Exec(ctx, `DELETE FROM `+s.sql.table+` WHERE user_id = $1::uuid AND key = $2::text`, userID, key)
	if err != nil {
		return false, storeError(ctx, "delete", err)
	}
	return tag.RowsAffected() > 0, nil
}

// query runs a SELECT of recordColumns and decodes its rows.
func (s *Store) query(ctx context.Context, op, sql string, args ...any) ([]idemstore.Record, error) {
	db, ok := s.db.(admin)
	if !ok {
		return nil, storeError(ctx, op, errors.New("the store's connection cannot run queries"))
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, storeError(ctx, op, err)
	}
	defer rows.Close()
	var out []idemstore.Record
	for rows.Next() {
		var (
			rec      idemstore.Record
			status   string
			envelope *string
			lease    *time.Time
		)
		if err := rows.Scan(&rec.UserID, &rec.Key, &rec.Owner, &rec.Fingerprint, &status, &envelope, &rec.CreatedAt, &lease, &rec.ExpiresAt); err != nil {
			return nil, storeError(ctx, op, err)
		}
		rec.Status = idemstore.Status(status)
		rec.CreatedAt, rec.ExpiresAt = rec.CreatedAt.UTC(), rec.ExpiresAt.UTC()
		if lease != nil {
			rec.LeaseUntil = lease.UTC()
		}
		if envelope != nil {
			if rec.Response, err = decodeEnvelope(*envelope); err != nil {
				return nil, storeError(ctx, op, fmt.Errorf("the record (%s, %s): %w", rec.UserID, rec.Key, err))
			}
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError(ctx, op, err)
	}
	return out, nil
}
