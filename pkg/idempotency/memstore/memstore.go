// Package memstore is an idemstore.Store in memory, for unit tests and local
// runs. One line gives a wrapped handler, middleware or function a store with
// no server at all.
//
//	h, err := idempotency.Wrap(createOrder, idempotency.Config{Store: memstore.New()})
//
// It keeps the Store contract: claims, leases and their renewal, expiry, the
// owner's fencing. It passes the conformance suite of package storetest. So a
// handler's test sees what production would. A retry replays, a duplicate in
// progress is refused, and an error releases the key. It also implements
// idemstore.Admin, so a test can look at the records a handler left.
//
// Its records live in the process and die with it: it is not a store for
// production, where two execution environments must share their records
// (use pgstore, redisstore or dynamostore). Like a store with a server, it
// decides takeover and expiry against the earlier of the caller's clock
// (Claim.Now) and its own, the process's time.Now.
//
// It has no key prefix. Each Store is a set of records of its own, and two
// Stores never see each other's. So the Store is the boundary between the
// services of a test.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Store is an idemstore.Store in memory. It is safe for concurrent use.
// The zero value is not usable; call New.
type Store struct {
	mu      sync.Mutex
	records map[id]idemstore.Record
}

type id struct{ userID, key string }

var (
	_ idemstore.Store = (*Store)(nil)
	_ idemstore.Admin = (*Store)(nil)
)

// New returns an empty Store.
func New() *Store {
	return &Store{records: map[id]idemstore.Record{}}
}

// Claim implements idemstore.Store.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: err}
	}
	if err := checkIDs("claim", c.UserID, c.Key); err != nil {
		return idemstore.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := c.Now
	if own := time.Now(); own.Before(now) {
		now = own
	}
	k := id{c.UserID, c.Key}
	if rec, ok := s.records[k]; ok && rec.Live(now) {
		return c.Found(copyRecord(rec)), nil
	}
	res := c.Inserted()
	s.records[k] = res.Record
	return res, nil
}

// Complete implements idemstore.Store.
func (s *Store) Complete(ctx context.Context, c idemstore.Completion) error {
	if err := ctx.Err(); err != nil {
		return &idemstore.Error{Op: "complete", Err: err}
	}
	if err := checkIDs("complete", c.UserID, c.Key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := id{c.UserID, c.Key}
	rec, ok := s.records[k]
	if !ok || rec.Status != idemstore.StatusInProgress || rec.Owner != c.Owner {
		return idemstore.ErrLeaseLost
	}
	resp := copyResponse(c.Response)
	rec.Status, rec.Response, rec.ExpiresAt, rec.LeaseUntil = idemstore.StatusCompleted, &resp, c.ExpiresAt, time.Time{}
	s.records[k] = rec
	return nil
}

// Release implements idemstore.Store.
func (s *Store) Release(ctx context.Context, r idemstore.Ref) error {
	if err := ctx.Err(); err != nil {
		return &idemstore.Error{Op: "release", Err: err}
	}
	if err := checkIDs("release", r.UserID, r.Key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := id{r.UserID, r.Key}
	rec, ok := s.records[k]
	if !ok || rec.Status != idemstore.StatusInProgress || rec.Owner != r.Owner {
		return idemstore.ErrLeaseLost
	}
	delete(s.records, k)
	return nil
}

// Renew implements idemstore.Store.
func (s *Store) Renew(ctx context.Context, r idemstore.Renewal) error {
	if err := ctx.Err(); err != nil {
		return &idemstore.Error{Op: "renew", Err: err}
	}
	if err := checkIDs("renew", r.UserID, r.Key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := id{r.UserID, r.Key}
	rec, ok := s.records[k]
	if !ok || rec.Status != idemstore.StatusInProgress || rec.Owner != r.Owner {
		return idemstore.ErrLeaseLost
	}
	rec.LeaseUntil = r.LeaseUntil
	if r.LeaseUntil.After(rec.ExpiresAt) {
		rec.ExpiresAt = r.LeaseUntil
	}
	s.records[k] = rec
	return nil
}

// Get implements idemstore.Admin.
func (s *Store) Get(ctx context.Context, userID, key string) (idemstore.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.Record{}, false, &idemstore.Error{Op: "get", Err: err}
	}
	if err := checkIDs("get", userID, key); err != nil {
		return idemstore.Record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[id{userID, key}]
	if !ok || !rec.ExpiresAt.After(time.Now()) {
		return idemstore.Record{}, false, nil
	}
	return copyRecord(rec), true, nil
}

// List implements idemstore.Admin.
func (s *Store) List(ctx context.Context, q idemstore.ListQuery) ([]idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, &idemstore.Error{Op: "list", Err: err}
	}
	if q.UserID != "" && !idemstore.IsID(q.UserID) {
		return nil, &idemstore.Error{Op: "list", Err: fmt.Errorf("the user id %.80q is %w", q.UserID, idemstore.ErrNotID), Permanent: true}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []idemstore.Record
	for k, rec := range s.records {
		if (q.UserID != "" && k.userID != q.UserID) || (q.Status != "" && rec.Status != q.Status) || !rec.ExpiresAt.After(now) {
			continue
		}
		out = append(out, copyRecord(rec))
	}
	slices.SortFunc(out, func(a, b idemstore.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.UserID, b.UserID), cmp.Compare(a.Key, b.Key))
	})
	if n := q.Limited(); len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// Delete implements idemstore.Admin.
func (s *Store) Delete(ctx context.Context, userID, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, &idemstore.Error{Op: "delete", Err: err}
	}
	if err := checkIDs("delete", userID, key); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := id{userID, key}
	_, ok := s.records[k]
	delete(s.records, k)
	return ok, nil
}

// checkIDs refuses, for good, ids that are not lower-case UUIDs, as every
// store does.
func checkIDs(op, userID, key string) error {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return &idemstore.Error{Op: op, Err: err, Permanent: true}
	}
	return nil
}

func copyRecord(rec idemstore.Record) idemstore.Record {
	if rec.Response != nil {
		resp := copyResponse(*rec.Response)
		rec.Response = &resp
	}
	return rec
}

// copyResponse returns r with nothing shared with it: its own header map
// and origin, the origin's time to the microsecond in UTC, as the other
// stores keep it.
func copyResponse(r idemstore.Response) idemstore.Response {
	r.Headers = cloneHeaders(r.Headers)
	if r.Origin != nil {
		o := *r.Origin
		o.At = time.UnixMicro(o.At.UnixMicro()).UTC()
		r.Origin = &o
	}
	return r
}

func cloneHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}
