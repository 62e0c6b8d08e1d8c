package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

type v2Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

func created(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{}`}, nil
}

func quiet(cfg idempotency.Config) idempotency.Config {
	cfg.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	if cfg.Metrics == nil {
		cfg.Metrics = io.Discard
	}
	return cfg
}

func TestWrapRefusesInvalidConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  idempotency.Config
		want []string
	}{
		{"no store", idempotency.Config{}, []string{"Config.Store is nil"}},
		{"safe method", idempotency.Config{Store: newMemStore(), Methods: []string{"POST", "get"}}, []string{"GET", "safe method"}},
		{"blank method", idempotency.Config{Store: newMemStore(), Methods: []string{" "}}, []string{"not an HTTP method"}},
		{"negative durations", idempotency.Config{Store: newMemStore(), Settings: idempotency.Settings{TTL: -time.Second, MaxLease: -1, LeaseMargin: -1}}, []string{"Config.TTL", "Config.MaxLease", "Config.LeaseMargin"}},
		{"lease longer than TTL", idempotency.Config{Store: newMemStore(), Settings: idempotency.Settings{TTL: time.Minute}}, []string{"longer than Config.TTL"}},
		{"bad replay header", idempotency.Config{Store: newMemStore(), ReplayHeaders: []string{"X-Ok", "Bad Header:"}}, []string{"Config.ReplayHeaders"}},
		{"negative body limit and finish bound", idempotency.Config{Store: newMemStore(), MaxBodyBytes: -1, Settings: idempotency.Settings{FinishTimeout: -time.Second}}, []string{"Config.MaxBodyBytes", "Config.FinishTimeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := idempotency.Wrap(v2Handler(created), tc.cfg)
			require.Error(t, err)
			require.Nil(t, h)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	_, err := idempotency.Wrap(v2Handler(nil), idempotency.Config{Store: newMemStore()})
	require.ErrorContains(t, err, "nil")
}

func TestWrapDefaults(t *testing.T) {
	t.Parallel()
	h, err := idempotency.Wrap(v2Handler(created), idempotency.Config{Store: newMemStore()})
	require.NoError(t, err)
	require.NotNil(t, h)
}

// request returns a protected v2 request for user and key.
func request(user, key string) events.APIGatewayV2HTTPRequest {
	r := events.APIGatewayV2HTTPRequest{
		RawPath: "/tasks",
		Headers: map[string]string{"idempotency-key": key, "content-type": "application/json"},
		Body:    `{"title":"x"}`,
	}
	r.RequestContext.HTTP.Method = http.MethodPost
	r.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": user}},
	}
	return r
}

// recordingStore remembers the claims it was given.
type recordingStore struct {
	*memStore
	claims []idemstore.Claim
}

func (s *recordingStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	s.claims = append(s.claims, c)
	return s.memStore.Claim(ctx, c)
}

func TestClaimCarriesLeaseExpiryAndOwner(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	store := &recordingStore{memStore: newMemStore()}
	h, err := idempotency.Wrap(v2Handler(created), quiet(idempotency.Config{
		Store: store,
		Settings: idempotency.Settings{
			Clock:       func() time.Time { return now },
			TTL:         2 * time.Hour,
			MaxLease:    time.Minute,
			LeaseMargin: 3 * time.Second,
		},
	}))
	require.NoError(t, err)

	// A Lambda invocation: its request id is the owner, its deadline (on
	// the real clock) bounds the lease, counted from the injected clock.
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(10*time.Second))
	defer cancel()
	resp, err := h(ctx, request(userA, keyA))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// No deadline and no Lambda context: a random owner, one heartbeat's
	// lease (renewed while the handler runs; see heartbeat_test.go).
	resp, err = h(context.Background(), request(userA, keyB))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// A deadline already passed gives a lease that has run out at once.
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPast()
	_, err = h(past, request(userB, keyA))
	require.NoError(t, err)

	require.Len(t, store.claims, 3)
	c := store.claims[0]
	require.Equal(t, idemstore.Ref{UserID: userA, Key: keyA, Owner: "req-1"}, c.Ref)
	require.Equal(t, now, c.Now)
	require.WithinDuration(t, now.Add(13*time.Second), c.LeaseUntil, time.Second)
	require.False(t, c.LeaseUntil.After(now.Add(13*time.Second)))
	require.Equal(t, now.Add(2*time.Hour), c.ExpiresAt)
	require.Len(t, c.Fingerprint, 64)

	c = store.claims[1]
	require.Len(t, c.Owner, 32)
	require.Equal(t, now.Add(idempotency.DefaultHeartbeat), c.LeaseUntil)

	require.Equal(t, now, store.claims[2].LeaseUntil)
}

func TestLogAndMetricLines(t *testing.T) {
	t.Parallel()
	var logs, metrics bytes.Buffer
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	h, err := idempotency.Wrap(v2Handler(created), idempotency.Config{
		Store: newMemStore(),
		Settings: idempotency.Settings{
			Clock:     func() time.Time { return now },
			Logger:    slog.New(slog.NewJSONHandler(&logs, nil)),
			Metrics:   &metrics,
			Namespace: "tasks-api",
		},
	})
	require.NoError(t, err)
	_, err = h(context.Background(), request(userA, keyA))
	require.NoError(t, err)
	_, err = h(context.Background(), request(userA, keyA))
	require.NoError(t, err)

	ts := strconv.FormatInt(now.UnixMilli(), 10)
	lines := strings.Split(strings.TrimSpace(metrics.String()), "\n")
	require.Len(t, lines, 2)
	require.JSONEq(t, `{
		"_aws": {"Timestamp": `+ts+`, "CloudWatchMetrics": [{
			"Namespace": "tasks-api",
			"Dimensions": [[]],
			"Metrics": [{"Name": "claimed", "Unit": "Count"}, {"Name": "completed", "Unit": "Count"}]
		}]},
		"claimed": 1, "completed": 1
	}`, lines[0])
	require.JSONEq(t, `{
		"_aws": {"Timestamp": `+ts+`, "CloudWatchMetrics": [{
			"Namespace": "tasks-api",
			"Dimensions": [[]],
			"Metrics": [{"Name": "replayed", "Unit": "Count"}]
		}]},
		"replayed": 1
	}`, lines[1])

	logLines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, logLines, 2)
	var replayed map[string]any
	require.NoError(t, json.Unmarshal([]byte(logLines[1]), &replayed))
	require.Equal(t, "replayed", replayed["outcome"])
	require.Equal(t, keyA, replayed["key"])
	require.Equal(t, userA, replayed["user"])
	require.Equal(t, false, replayed["claimed"])
	require.Equal(t, float64(201), replayed["status"])
}

func TestStoreErrorTextStaysInTheLog(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h, err := idempotency.Wrap(v2Handler(created), idempotency.Config{
		Store: failingStore{},
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
			Metrics: io.Discard,
		},
	})
	require.NoError(t, err)
	resp, err := h(context.Background(), request(userA, keyA))
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotContains(t, resp.Body, "connection refused")
	require.Contains(t, logs.String(), "connection refused")
	require.Contains(t, logs.String(), `"level":"ERROR"`)
}

type failingStore struct{}

func (failingStore) Claim(context.Context, idemstore.Claim) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: errors.New("dial tcp 10.0.0.1:5432: connection refused")}
}
func (failingStore) Complete(context.Context, idemstore.Completion) error { return nil }
func (failingStore) Release(context.Context, idemstore.Ref) error         { return nil }
func (failingStore) Renew(context.Context, idemstore.Renewal) error       { return nil }

const (
	userA = "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"
	userB = "0b8a5d9c-7e6f-4a3b-8c2d-1e0f9a8b7c6d"
	keyA  = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	keyB  = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
)

// TestDoNotStore: a handler that marks its answer as not to be stored gets
// its record released, so the next request with the key runs the handler
// again, and the mark means nothing outside a protected request.
func TestDoNotStore(t *testing.T) {
	t.Parallel()
	require.False(t, idempotency.DoNotStore(context.Background()))

	store := newMemStore()
	runs := 0
	refuseFirst := func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		if runs == 1 {
			require.True(t, idempotency.DoNotStore(ctx))
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusUnprocessableEntity, Body: `{"code":"idempotency_key_reused"}`}, nil
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"id":1}`}, nil
	}
	h, err := idempotency.Wrap(refuseFirst, quiet(idempotency.Config{Store: store}))
	require.NoError(t, err)
	req := request("0b4c3d2e-1f0a-4b9c-8d7e-6f5a4b3c2d1e", "8e03978e-40d5-43e8-bc93-6894a57f9324")

	first, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, first.StatusCode)
	left, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, left, "the refusal was not stored: the record is released")

	second, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, second.StatusCode)
	require.Empty(t, second.Headers[idempotency.ReplayedHeader])

	third, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "true", third.Headers[idempotency.ReplayedHeader], "a stored answer replays as usual")
	require.Equal(t, 2, runs)
}

func TestMaxBodyBytesIsInclusive(t *testing.T) {
	t.Parallel()
	h, err := idempotency.Wrap(v2Handler(created), quiet(idempotency.Config{Store: newMemStore(), MaxBodyBytes: 16}))
	require.NoError(t, err)
	req := request("8e03978e-40d5-43e8-bc93-6894a57f9324", "5b1b6a5e-0b0c-4b8e-9d3f-2a7c1e0f4d61")
	req.Body = `{"t":"1234567"}` + " " // 16 bytes
	resp, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	req.Headers["idempotency-key"] = "0e9a2c55-7f1d-4c3b-8a6e-5d4f3b2a1c0e"
	req.Body += " "
	resp, err = h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Headers["Content-Type"])
	require.Contains(t, resp.Body, `"code":"payload_too_large"`)
	require.Contains(t, resp.Body, "16 bytes")
}
