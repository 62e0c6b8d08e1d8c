package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// The replay benchmarks run one client, one call at a time, on a direct
// connection in the prepared mode: the store's claim of a completed key
// alone, and the decorator's replay around it. Their allocations are the
// client's whole path; their times include the round trip.

func benchReplayStore(b *testing.B) *pgstore.Store {
	b.Helper()
	db := newDB(b)
	pool, err := dbpool.New(context.Background(), dbpool.Config{Auth: dbpool.AuthURL, URL: db.URL, MaxConns: 2, QueryMode: dbpool.QueryModePrepared})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	st, err := pgstore.New(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	return st
}

func BenchmarkClaimReplayPrepared(b *testing.B) {
	st := benchReplayStore(b)
	ctx := context.Background()
	now := time.Now()
	c := idemstore.Claim{Ref: idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()},
		Fingerprint: "ab", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	if _, err := st.Claim(ctx, c); err != nil {
		b.Fatal(err)
	}
	resp := idemstore.Response{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"1"}`}
	if err := st.Complete(ctx, idemstore.Completion{Ref: c.Ref, Response: resp, Now: now, ExpiresAt: c.ExpiresAt}); err != nil {
		b.Fatal(err)
	}
	c.Owner = uuid.NewString()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := st.Claim(ctx, c)
		if err != nil || res.Claimed || res.Record.Response == nil {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkWrapReplayPrepared(b *testing.B) {
	storekit.BenchWrapReplay(b, benchReplayStore(b))
}
