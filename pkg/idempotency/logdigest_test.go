package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// TestLogDigestSecretKeepsIdentifiersOutOfTheLog: with LogDigestSecret, no
// raw key, subject, user id, scope or path reaches a log line, whatever the
// outcome, and the digests the lines carry are the ones an operator
// computes from the raw values (observe.Digest).
func TestLogDigestSecretKeepsIdentifiersOutOfTheLog(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	var logs bytes.Buffer
	settings := idempotency.Settings{LogDigestSecret: secret, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: io.Discard}
	store := memstore.New()

	const sub, key = "auth0|private-person", "order-4711-secret"
	h, err := idempotency.Wrap(countingCreate(new(int)), idempotency.Config{Store: store, KeyFormat: idempotency.KeyOpaque,
		Key: idempotency.PathKey("order"), Settings: settings})
	require.NoError(t, err)
	h2, err := idempotency.Wrap(countingCreate(new(int)), idempotency.Config{Store: store, KeyFormat: idempotency.KeyOpaque, Settings: settings})
	require.NoError(t, err)
	req := v2Post("/orders/"+key, sub, nil, `{"amount":1}`)
	req.PathParameters = map[string]string{"order": key}
	for _, body := range []string{`{"amount":1}`, `{"amount":1}`, `{"amount":2}`} { // run, replay, mismatch
		req.Body = body
		_, err := h(context.Background(), req)
		require.NoError(t, err)
	}
	hdr := v2Post("/orders", sub, map[string]string{"idempotency-key": key}, `{}`)
	_, err = h2(context.Background(), hdr)
	require.NoError(t, err)

	const scope, fkey = "tenant-secret-scope", "msg-secret-id"
	f, err := idempotency.Function(func(ctx context.Context, in string) (string, error) {
		if in == "fail" {
			return "", errors.New("handler failed")
		}
		return "ok", nil
	}, idempotency.FunctionConfig[string]{Store: store, Name: "charge",
		Key:      func(context.Context, string) (string, error) { return fkey, nil },
		Scope:    func(context.Context, string) (string, error) { return scope, nil },
		Settings: settings})
	require.NoError(t, err)
	_, _ = f(context.Background(), "fail")
	_, err = f(context.Background(), "x")
	require.NoError(t, err)
	_, err = f(context.Background(), "x")
	require.NoError(t, err)

	out := logs.String()
	require.Equal(t, 7, strings.Count(out, `"msg":"idempotency"`), out)
	for _, secretValue := range []string{key, sub, idempotency.SubjectUUID(sub), scope, fkey, "/orders/"} {
		require.NotContains(t, out, secretValue, "a raw identifier reached the log")
	}
	require.Contains(t, out, `"key":"`+observe.Digest(secret, key)+`"`)
	require.Contains(t, out, `"user":"`+observe.Digest(secret, idempotency.SubjectUUID(sub))+`"`)
	require.Contains(t, out, `"method":"`+http.MethodPost+`"`)

	_, err = idempotency.Wrap(countingCreate(new(int)), idempotency.Config{Store: store, Settings: idempotency.Settings{LogDigestSecret: []byte("short")}})
	require.ErrorContains(t, err, "LogDigestSecret is 5 bytes")
}
