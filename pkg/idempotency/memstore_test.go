package idempotency_test

import (
	"context"
	"sync"

	"github.com/ichido/ichido/pkg/idempotency"
)

// memStore is an in-memory Store for the tests of this package only: it
// follows the Store contract but keeps nothing across processes. Having no
// server, it decides with the caller's clock alone.
type memStore struct {
	mu      sync.Mutex
	records map[[2]string]idempotency.Record
}

func newMemStore() *memStore {
	return &memStore{records: map[[2]string]idempotency.Record{}}
}

func (s *memStore) Claim(_ context.Context, c idempotency.Claim) (idempotency.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := [2]string{c.UserID, c.Key}
	if rec, ok := s.records[id]; ok && live(rec, c) {
		if rec.Status == idempotency.StatusInProgress && rec.Owner == c.Owner && rec.RequestHash == c.RequestHash {
			return idempotency.ClaimResult{Claimed: true, Record: rec}, nil
		}
		return idempotency.ClaimResult{Record: rec}, nil
	}
	rec := idempotency.Record{
		UserID:      c.UserID,
		Key:         c.Key,
		Owner:       c.Owner,
		RequestHash: c.RequestHash,
		Status:      idempotency.StatusInProgress,
		CreatedAt:   c.Now,
		LeaseUntil:  c.LeaseUntil,
		ExpiresAt:   c.ExpiresAt,
	}
	s.records[id] = rec
	return idempotency.ClaimResult{Claimed: true, Record: rec}, nil
}

func live(rec idempotency.Record, c idempotency.Claim) bool {
	if !rec.ExpiresAt.After(c.Now) {
		return false
	}
	return rec.Status != idempotency.StatusInProgress || rec.LeaseUntil.After(c.Now)
}

func (s *memStore) Complete(_ context.Context, c idempotency.Completion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := [2]string{c.UserID, c.Key}
	rec, ok := s.records[id]
	if !ok || rec.Status != idempotency.StatusInProgress || rec.Owner != c.Owner {
		return idempotency.ErrLeaseLost
	}
	resp := c.Response
	rec.Status, rec.Response, rec.ExpiresAt, rec.LeaseUntil = idempotency.StatusCompleted, &resp, c.ExpiresAt, c.Now
	s.records[id] = rec
	return nil
}

func (s *memStore) Release(_ context.Context, r idempotency.Ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := [2]string{r.UserID, r.Key}
	rec, ok := s.records[id]
	if !ok || rec.Status != idempotency.StatusInProgress || rec.Owner != r.Owner {
		return idempotency.ErrLeaseLost
	}
	delete(s.records, id)
	return nil
}

func (s *memStore) Renew(_ context.Context, r idempotency.Renewal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := [2]string{r.UserID, r.Key}
	rec, ok := s.records[id]
	if !ok || rec.Status != idempotency.StatusInProgress || rec.Owner != r.Owner {
		return idempotency.ErrLeaseLost
	}
	rec.LeaseUntil = r.LeaseUntil
	if r.LeaseUntil.After(rec.ExpiresAt) {
		rec.ExpiresAt = r.LeaseUntil
	}
	s.records[id] = rec
	return nil
}
