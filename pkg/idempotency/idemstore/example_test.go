package idemstore_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// mapStore is the skeleton of a Store: one record per user id and key, a
// claim that inserts or returns the live record, and three writes fenced by
// the owner token. A real store does each method in one atomic round trip
// to its server, and wraps its failures in *idemstore.Error.
type mapStore struct {
	mu   sync.Mutex
	recs map[[2]string]idemstore.Record
}

var _ idemstore.Store = (*mapStore)(nil)

func (s *mapStore) Claim(_ context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	if err := idemstore.CheckIDs(c.UserID, c.Key); err != nil {
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: err, Permanent: true}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := [2]string{c.UserID, c.Key}
	if rec, ok := s.recs[id]; ok && rec.Live(c.Now) {
		return c.Found(rec), nil
	}
	res := c.Inserted() // absent, expired or lease run out: a takeover
	s.recs[id] = res.Record
	return res, nil
}

func (s *mapStore) Complete(_ context.Context, c idemstore.Completion) error {
	return s.fenced(c.Ref, func(rec *idemstore.Record) {
		resp := c.Response
		rec.Status, rec.Response = idemstore.StatusCompleted, &resp
		rec.LeaseUntil, rec.ExpiresAt = time.Time{}, c.ExpiresAt
	})
}

func (s *mapStore) Release(_ context.Context, r idemstore.Ref) error {
	return s.fenced(r, func(*idemstore.Record) { delete(s.recs, [2]string{r.UserID, r.Key}) })
}

func (s *mapStore) Renew(_ context.Context, r idemstore.Renewal) error {
	return s.fenced(r.Ref, func(rec *idemstore.Record) {
		rec.LeaseUntil = r.LeaseUntil
		if rec.ExpiresAt.Before(r.LeaseUntil) {
			rec.ExpiresAt = r.LeaseUntil
		}
	})
}

// fenced applies write to r's record while it is in progress under r.Owner,
// and returns ErrLeaseLost otherwise.
func (s *mapStore) fenced(r idemstore.Ref, write func(*idemstore.Record)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := [2]string{r.UserID, r.Key}
	rec, ok := s.recs[id]
	if !ok || rec.Status != idemstore.StatusInProgress || rec.Owner != r.Owner {
		return idemstore.ErrLeaseLost
	}
	write(&rec)
	if _, still := s.recs[id]; still {
		s.recs[id] = rec
	}
	return nil
}

// A store's skeleton: the first claim inserts the record, a second caller
// finds it in progress, the owner completes it, and a retry finds the
// response.
func Example() {
	ctx := context.Background()
	store := &mapStore{recs: map[[2]string]idemstore.Record{}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claim := func(owner string) idemstore.Claim {
		return idemstore.Claim{
			Ref:         idemstore.Ref{UserID: "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324", Owner: owner},
			Fingerprint: "f1", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(24 * time.Hour),
		}
	}
	first, _ := store.Claim(ctx, claim("run-1"))
	fmt.Println("run-1 claimed:", first.Claimed)
	second, _ := store.Claim(ctx, claim("run-2"))
	fmt.Println("run-2 claimed:", second.Claimed, second.Record.Status)
	err := store.Complete(ctx, idemstore.Completion{Ref: claim("run-1").Ref, Response: idemstore.Response{StatusCode: 201, Body: `{"id":1}`}, Now: now, ExpiresAt: now.Add(24 * time.Hour)})
	fmt.Println("completed:", err)
	fmt.Println("run-2 again:", store.Release(ctx, claim("run-2").Ref))
	retry, _ := store.Claim(ctx, claim("run-3"))
	fmt.Println("retry:", retry.Claimed, retry.Record.Status, retry.Record.Response.Body)
	// Output:
	// run-1 claimed: true
	// run-2 claimed: false in_progress
	// completed: <nil>
	// run-2 again: idempotency: lease lost: the record is no longer owned by this invocation
	// retry: false completed {"id":1}
}
