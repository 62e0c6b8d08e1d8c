package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
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
	st := benchReplayStore(b)
	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"1"}`}, nil
	}, idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}})
	if err != nil {
		b.Fatal(err)
	}
	req := events.APIGatewayV2HTTPRequest{RawPath: "/tasks", Body: `{"title":"Write the deploy guide"}`,
		Headers: map[string]string{"idempotency-key": uuid.NewString(), "content-type": "application/json"}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": uuid.NewString()}},
	}
	ctx := context.Background()
	if _, err := h(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp, err := h(ctx, req)
		if err != nil || resp.Headers[idempotency.ReplayedHeader] != "true" {
			b.Fatal(resp, err)
		}
	}
}
