package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestPreparedStatementsBehindPoolerFailLoudly puts a pool in the mode that
// keeps named prepared statements (pgx's default) behind pgbouncer in
// transaction pooling mode, the wrong choice a user can make. pgbouncer has
// one server connection, so each statement prepared is found again on the
// next call and nothing fails by itself: without the store's check, claims
// succeed, and the first completion that a second server connection (or a
// restarted one) does not know would fail after the handler ran. With it,
// every call fails at once, permanently, naming the cure, the handler never
// runs, and nothing is written. The same store on a direct connection in
// the same mode works (TestConformanceQueryExecModes).
func TestPreparedStatementsBehindPoolerFailLoudly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	serverURL, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	server, err := pgx.ParseConfig(serverURL)
	require.NoError(t, err)
	b := pgtest.PgBouncerFor(t, serverURL, pgtest.PgBouncerOptions{Settings: map[string]string{"default_pool_size": "1"}})
	pool := newPool(t, b.URL("postgres", server.Database), func(c *pgxpool.Config) {
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	})
	st := must.Value(pgstore.New(pool, &pgstore.Options{Schema: db.Schema}))
	admin := must.Value(pgstore.New(db.Pool, nil))

	now := time.Now()
	user := uuid.NewString()
	for i := range 3 {
		ref := idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: "o"}
		_, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		var se *idemstore.Error
		require.True(t, errors.As(err, &se), "claim %d through the pooler: %v", i, err)
		require.Equal(t, "claim", se.Op)
		require.True(t, se.Permanent, "%v", err)
		require.ErrorContains(t, err, "connection pooler")
		require.ErrorContains(t, err, "QueryExecModeExec")
		_, found, err := admin.Get(ctx, ref.UserID, ref.Key)
		require.NoError(t, err)
		require.False(t, found, "a refused claim writes nothing")

		for op, err := range map[string]error{
			"complete": st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}),
			"release":  st.Release(ctx, ref),
			"renew":    st.Renew(ctx, idemstore.Renewal{Ref: ref, Now: now, LeaseUntil: now.Add(time.Minute)}),
		} {
			require.True(t, errors.As(err, &se), "%s: %v", op, err)
			require.Equal(t, op, se.Op)
			require.True(t, se.Permanent, "%s: %v", op, err)
		}
	}

	// Through the decorator: the handler never runs, and the client gets
	// the store's failure, not a response that a retry could run again.
	runs := 0
	h, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{}`}, nil
	}, quiet(idempotency.Config{Store: st}))
	require.NoError(t, err)
	resp, err := h(ctx, protectedRequest(http.MethodPost, "/tasks", user, uuid.NewString(), `{"title":"x"}`))
	require.NoError(t, err)
	require.GreaterOrEqual(t, resp.StatusCode, 500, resp.Body)
	require.Equal(t, "application/problem+json", resp.Headers["Content-Type"])
	require.Zero(t, runs, "the handler must not run when its completion could be lost")
}
