package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestCompletionWritesOneFormat: Redis 7.0 completes a record with the
// complete script on the server, Valkey 8.1 with SET … IFEQ and a value
// built in Go. Both write the same bytes for the same record, and the store
// reads back what was completed. The claims are byte for byte the same too.
func TestCompletionWritesOneFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	responses := map[string]idemstore.Response{
		"json":    {StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"3f0c"}`},
		"empty":   {StatusCode: 204},
		"escapes": {StatusCode: 200, Body: "line\n\t\"quoted\" ünïcödé \x00 \xff", Headers: map[string]string{"X-Note": "é\"\\\n"}},
		"base64":  {StatusCode: 200, Body: "aGVsbG8=", IsBase64Encoded: true},
		"large":   {StatusCode: 422, Body: strings.Repeat(`{"k":"v"}`, 5000)},
		"origin": {StatusCode: 201, Body: "{}", Origin: &idemstore.Origin{
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: now}},
		"not kept": {StatusCode: 500, Body: "", NotKept: true},
	}
	prefix := "format:" + uuid.NewString() + ":"
	for name, resp := range responses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "owner"}
			c := idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
			done := idemstore.Completion{Ref: ref, Response: resp, Now: now, ExpiresAt: now.Add(24 * time.Hour)}
			claims, completed := map[string]string{}, map[string]string{}
			for _, srv := range servers {
				client := srv.client(t)
				st := must.Value(redisstore.New(client, &redisstore.Options{KeyPrefix: prefix}))
				res, err := st.Claim(ctx, c)
				require.NoError(t, err)
				require.True(t, res.Claimed, srv.name)
				key := st.Key(ref.UserID, ref.Key)
				claims[srv.name] = client.Get(ctx, key).Val()
				require.NoError(t, st.Complete(ctx, done), srv.name)
				completed[srv.name] = client.Get(ctx, key).Val()

				rec, found, err := st.Get(ctx, ref.UserID, ref.Key)
				require.NoError(t, err)
				require.True(t, found)
				require.Equal(t, idemstore.StatusCompleted, rec.Status, srv.name)
				require.Equal(t, "h", rec.Fingerprint)
				require.True(t, now.Equal(rec.CreatedAt), srv.name)
				require.True(t, done.ExpiresAt.Equal(rec.ExpiresAt), srv.name)
				require.NotNil(t, rec.Response)
				got := *rec.Response
				if len(got.Headers) == 0 && len(resp.Headers) == 0 {
					got.Headers = resp.Headers
				}
				require.Equal(t, resp, got, srv.name)
			}
			require.NotEmpty(t, claims["redis"])
			require.Equal(t, claims["redis"], claims["valkey"], "the claim is written in one format")
			require.NotEmpty(t, completed["redis"])
			require.Equal(t, completed["redis"], completed["valkey"], "the script and SET … IFEQ write one format")
		})
	}
}
