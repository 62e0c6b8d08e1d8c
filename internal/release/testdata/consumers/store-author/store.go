// Package kvstore is an idempotency store of its own: records encoded
// with encoding/gob in a key-value map, as a store on an embedded database
// would keep them.
package kvstore

import (
	"bytes"
	"context"
	"encoding/gob"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Store keeps records in memory, one encoded value per user and key.
type Store struct {
	mu   sync.Mutex
	data map[string][]byte
	now  func() time.Time
}

var _ idemstore.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store { return &Store{data: map[string][]byte{}, now: time.Now} }

func key(userID, k string) string { return userID + "\x00" + k }

func (s *Store) load(k string) (idemstore.Record, bool, error) {
	v, ok := s.data[k]
	if !ok {
		return idemstore.Record{}, false, nil
	}
	var rec idemstore.Record
	if err := gob.NewDecoder(bytes.NewReader(v)).Decode(&rec); err != nil {
		return idemstore.Record{}, false, &idemstore.Error{Op: "read", Err: err, Permanent: true}
	}
	return rec, true, nil
}

func (s *Store) save(k string, rec idemstore.Record) error {
	var v bytes.Buffer
	if err := gob.NewEncoder(&v).Encode(rec); err != nil {
		return &idemstore.Error{Op: "write", Err: err, Permanent: true}
	}
	s.data[k] = v.Bytes()
	return nil
}

// Claim implements idemstore.Store. Expiry and takeover are decided against
// the earlier of the caller's clock and the store's own.
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
	if own := s.now(); own.Before(now) {
		now = own
	}
	k := key(c.UserID, c.Key)
	rec, ok, err := s.load(k)
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	if ok && rec.Live(now) {
		return c.Found(rec), nil
	}
	res := c.Inserted()
	return res, s.save(k, res.Record)
}

// owned returns the in-progress record of r, or ErrLeaseLost.
func (s *Store) owned(r idemstore.Ref) (idemstore.Record, error) {
	rec, ok, err := s.load(key(r.UserID, r.Key))
	if err != nil {
		return rec, err
	}
	if !ok || rec.Status != idemstore.StatusInProgress || rec.Owner != r.Owner {
		return rec, idemstore.ErrLeaseLost
	}
	return rec, nil
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
	rec, err := s.owned(c.Ref)
	if err != nil {
		return err
	}
	resp := c.Response
	if resp.Origin != nil { // kept to the microsecond, in UTC, as the contract asks
		o := *resp.Origin
		o.At = o.At.UTC().Truncate(time.Microsecond)
		resp.Origin = &o
	}
	rec.Status, rec.Response, rec.ExpiresAt, rec.LeaseUntil = idemstore.StatusCompleted, &resp, c.ExpiresAt, time.Time{}
	return s.save(key(c.UserID, c.Key), rec)
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
	if _, err := s.owned(r); err != nil {
		return err
	}
	delete(s.data, key(r.UserID, r.Key))
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
	rec, err := s.owned(r.Ref)
	if err != nil {
		return err
	}
	rec.LeaseUntil = r.LeaseUntil
	if r.LeaseUntil.After(rec.ExpiresAt) {
		rec.ExpiresAt = r.LeaseUntil
	}
	return s.save(key(r.UserID, r.Key), rec)
}

// checkIDs refuses, for good, ids that are not lower-case UUIDs, as the
// contract asks of every store.
func checkIDs(op, userID, key string) error {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return &idemstore.Error{Op: op, Err: err, Permanent: true}
	}
	return nil
}
