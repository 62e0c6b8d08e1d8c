package keystore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestRecordCommands finds, lists and deletes, on each store, the records
// that a handler (an opaque, prefixed key from a subject that is not a
// UUID), a Function and an SQS batch left, naming them as they were sent.
func TestRecordCommands(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) (idemstore.Store, func(string) string, []string)
	}{
		{"postgres", func(t *testing.T) (idemstore.Store, func(string) string, []string) {
			db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
				_, err := pgstore.Migrate(ctx, pool, nil)
				return err
			})
			return must.Value(pgstore.New(db.Pool, nil)), func(name string) string {
				if name == "DATABASE_URL" {
					return db.URL
				}
				return ""
			}, nil
		}},
		{"redis", func(t *testing.T) (idemstore.Store, func(string) string, []string) {
			prefix := "keystore-test-" + uuid.NewString() + ":"
			url := redistest.URL(t)
			return must.Value(redisstore.New(redistest.NewClient(t), &redisstore.Options{KeyPrefix: prefix})), func(name string) string {
				return map[string]string{"IDEMPOTENCY_STORE": "redis", "REDIS_URL": url}[name]
			}, []string{"-redis-prefix", prefix}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, env, storeArgs := c.setup(t)
			testRecordCommands(t, store, env, storeArgs)
		})
	}
}

// TestRecordCommandsDynamoDB is TestRecordCommands on a DynamoDB table.
// Not parallel: the AWS SDK reads its endpoint and credentials from the
// process's environment.
func TestRecordCommandsDynamoDB(t *testing.T) {
	srv := dynamotest.StartT(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	client := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
	store, err := dynamostore.New(client, &dynamostore.Options{Table: "keys", KeyPrefix: "svc:"})
	require.NoError(t, err)
	_, err = client.CreateTable(context.Background(), store.CreateTableInput())
	require.NoError(t, err)
	env := func(name string) string {
		return map[string]string{"IDEMPOTENCY_STORE": "dynamodb", "AWS_REGION": dynamotest.Region}[name]
	}
	testRecordCommands(t, store, env, []string{"-table", "keys", "-dynamodb-prefix", "svc:"})
}

func testRecordCommands(t *testing.T, store idemstore.Store, env func(string) string, storeArgs []string) {
	ctx := context.Background()
	keystore := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append(args[:1:1], append(append([]string{}, storeArgs...), args[1:]...)...), &out, env)
		return out.String(), err
	}
	records := func(out string) []map[string]any {
		var recs []map[string]any
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			recs = append(recs, m)
		}
		return recs
	}
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))

	// A request with an opaque key, under a prefix, from an Auth0 user.
	runs := 0
	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"order":"ord-1"}`}, nil
	}, idempotency.Config{Store: store, KeyFormat: idempotency.KeyOpaque, Settings: idempotency.Settings{KeyPrefix: "orders", Logger: quiet, Metrics: io.Discard}})
	require.NoError(t, err)
	sub := "auth0|" + uuid.NewString()
	req := events.APIGatewayV2HTTPRequest{RawPath: "/orders", Headers: map[string]string{"idempotency-key": "order-1/charge"}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}},
	}
	_, err = h(ctx, req)
	require.NoError(t, err)

	httpRecord := []string{"-sub", sub, "-key", "order-1/charge", "-key-format", "opaque", "-prefix", "orders"}
	out, err := keystore(append([]string{"get"}, httpRecord...)...)
	require.NoError(t, err)
	recs := records(out)
	require.Len(t, recs, 1)
	require.Equal(t, "completed", recs[0]["status"])
	require.Equal(t, idempotency.SubjectUUID(sub), recs[0]["user_id"])
	require.Equal(t, `{"order":"ord-1"}`, recs[0]["response"].(map[string]any)["body"])
	_, err = keystore("get", "-sub", sub, "-key", "order-1/charge", "-key-format", "opaque")
	require.ErrorContains(t, err, "no record", "without the prefix, another record")

	// A Function call, listed while it is in progress, by its name.
	name := "charge-" + uuid.NewString()
	var during string
	charge, err := idempotency.Function(func(ctx context.Context, orderID string) (string, error) {
		out, err := keystore("list", "-status", "in_progress", "-function", name)
		require.NoError(t, err)
		during = out
		return "charged " + orderID, nil
	}, idempotency.FunctionConfig[string]{
		Store: store, Name: name,
		Key:      func(_ context.Context, orderID string) (string, error) { return orderID, nil },
		Settings: idempotency.Settings{Logger: quiet, Metrics: io.Discard},
	})
	require.NoError(t, err)
	_, err = charge(ctx, "ord-1")
	require.NoError(t, err)
	recs = records(during)
	require.Len(t, recs, 1, "the call in progress")
	userID, key, err := idempotency.FunctionRecordID("", name, "", "ord-1")
	require.NoError(t, err)
	require.Equal(t, key, recs[0]["key"])
	require.Equal(t, userID, recs[0]["user_id"])
	require.Equal(t, false, recs[0]["lease_expired"])
	out, err = keystore("list", "-status", "in_progress", "-function", name)
	require.NoError(t, err)
	require.Empty(t, records(out), "done now")
	out, err = keystore("get", "-function", name, "-key", "ord-1")
	require.NoError(t, err)
	require.Equal(t, `"charged ord-1"`, records(out)[0]["response"].(map[string]any)["body"])

	// An SQS message, by its message id.
	queue := "activity-" + uuid.NewString()
	batch, err := idempotency.SQSHandler(func(context.Context, events.SQSMessage) error { return nil },
		idempotency.FunctionConfig[events.SQSMessage]{Store: store, Name: queue, Settings: idempotency.Settings{Logger: quiet, Metrics: io.Discard}})
	require.NoError(t, err)
	msg := events.SQSMessage{MessageId: uuid.NewString(), Body: `{}`}
	_, err = batch(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
	require.NoError(t, err)
	out, err = keystore("get", "-function", queue, "-key", msg.MessageId)
	require.NoError(t, err)
	require.Equal(t, "completed", records(out)[0]["status"])

	// Listing by user, every status; then delete frees the key.
	out, err = keystore("list", "-sub", sub)
	require.NoError(t, err)
	require.Len(t, records(out), 1)
	out, err = keystore("list")
	require.NoError(t, err)
	require.Len(t, records(out), 3, "every record of this store")
	out, err = keystore(append([]string{"delete"}, httpRecord...)...)
	require.NoError(t, err)
	require.Contains(t, out, "deleted")
	_, err = keystore(append([]string{"delete"}, httpRecord...)...)
	require.ErrorContains(t, err, "no record")
	_, err = h(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 2, runs, "the deleted key runs again")

	// By the ids as stored.
	out, err = keystore("get", "-user", userID, "-record-key", key)
	require.NoError(t, err)
	require.Len(t, records(out), 1)

	// Flags that name nothing, or too much.
	_, err = keystore("get", "-key", "x")
	require.ErrorContains(t, err, "name the user")
	_, err = keystore("get", "-sub", sub)
	require.ErrorContains(t, err, "name the key")
	_, err = keystore("get", "-user", uuid.NewString(), "-function", name, "-key", "x")
	require.ErrorContains(t, err, "once")
	_, err = keystore("get", "-sub", sub, "-scope", "s", "-function", name, "-key", "x")
	require.ErrorContains(t, err, "not both", "-sub is -function's scope")
	_, err = keystore("get", "-sub", sub, "-key", "not-a-uuid")
	require.ErrorContains(t, err, "not a UUID version 4")
	require.ErrorContains(t, err, "pass -key-format opaque", "the error names the flag")
	_, err = keystore("list", "-status", "done")
	require.ErrorContains(t, err, "-status")
}

// TestGetShowsWhoAndWhen: on PostgreSQL, a record that a handler with
// opaque keys left is refused under the default key format with an error
// that names -key-format, and found with -key-format opaque; the record
// shows the subject beside its derived user id, the key as sent, its
// status, what its fingerprint hashes, and its times in RFC 3339 UTC; a
// user made by IssuerSubject is found with -issuer. A Function's record in
// progress shows the function, its scope and its lease.
func TestGetShowsWhoAndWhen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pgstore.Migrate(ctx, pool, nil)
		return err
	})
	store := must.Value(pgstore.New(db.Pool, nil))
	env := func(name string) string {
		if name == "DATABASE_URL" {
			return db.URL
		}
		return ""
	}
	keystore := func(args ...string) (map[string]any, error) {
		var out bytes.Buffer
		if err := run(ctx, args, &out, env); err != nil {
			return nil, err
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &m), out.String())
		return m, nil
	}
	quiet := idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}
	requireTime := func(m map[string]any, field string, from, to time.Time) time.Time {
		t.Helper()
		s, ok := m[field].(string)
		require.True(t, ok, "%s is a string: %v", field, m[field])
		at, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err, "%s is RFC 3339", field)
		require.True(t, strings.HasSuffix(s, "Z"), "%s is in UTC: %s", field, s)
		require.False(t, at.Before(from.Truncate(time.Millisecond)) || at.After(to), "%s %s is in [%s, %s]", field, s, from, to)
		return at
	}

	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"order":"ord-7"}`}, nil
	}, idempotency.Config{Store: store, KeyFormat: idempotency.KeyOpaque, Settings: quiet})
	require.NoError(t, err)
	sub := "auth0|" + uuid.NewString()
	req := events.APIGatewayV2HTTPRequest{RawPath: "/orders", Headers: map[string]string{"idempotency-key": "order-7"}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}},
	}
	before := time.Now()
	_, err = h(ctx, req)
	require.NoError(t, err)
	after := time.Now()

	_, err = keystore("get", "-sub", sub, "-key", "order-7")
	require.ErrorContains(t, err, "the key is not a UUID version 4")
	require.ErrorContains(t, err, "for another key format pass -key-format opaque")

	rec, err := keystore("get", "-sub", sub, "-key", "order-7", "-key-format", "opaque")
	require.NoError(t, err)
	require.Equal(t, sub, rec["subject"])
	require.Equal(t, idempotency.SubjectUUID(sub), rec["user_id"], "the subject beside the user id the store keeps")
	require.Equal(t, "order-7", rec["sent_key"])
	require.Equal(t, idempotency.RecordKey("", idempotency.KeyOpaque, "order-7"), rec["key"])
	require.Equal(t, "completed", rec["status"])
	require.Equal(t, "http_request", rec["request_hash_of"])
	require.NotEmpty(t, rec["request_hash"])
	created := requireTime(rec, "created_at", before, after)
	expires := requireTime(rec, "expires_at", before.Add(idempotency.DefaultTTL), after.Add(idempotency.DefaultTTL))
	require.True(t, expires.After(created))
	require.NotContains(t, rec, "lease_until", "no lease once completed")

	// A handler whose users are issuer and subject pairs.
	iss := "https://login.example.com/"
	hi, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{}`}, nil
	}, idempotency.Config{Store: store, KeyFormat: idempotency.KeyOpaque, Settings: quiet,
		Subject: func(context.Context, idempotency.Request) (string, error) {
			return idempotency.IssuerSubject(iss, sub), nil
		}})
	require.NoError(t, err)
	req.Headers = map[string]string{"idempotency-key": "order-8"}
	_, err = hi(ctx, req)
	require.NoError(t, err)
	_, err = keystore("get", "-sub", sub, "-key", "order-8", "-key-format", "opaque")
	require.ErrorContains(t, err, "no record", "the subject alone is another user")
	rec, err = keystore("get", "-issuer", iss, "-sub", sub, "-key", "order-8", "-key-format", "opaque")
	require.NoError(t, err)
	require.Equal(t, idempotency.SubjectUUID(idempotency.IssuerSubject(iss, sub)), rec["user_id"])
	require.Equal(t, sub, rec["subject"])
	require.Equal(t, iss, rec["issuer"])
	_, err = keystore("get", "-issuer", iss, "-key", "order-8", "-key-format", "opaque")
	require.ErrorContains(t, err, "-issuer qualifies -sub")

	// A Function's call, read while it runs.
	name := "refund-" + uuid.NewString()
	var during map[string]any
	var started time.Time
	refund, err := idempotency.Function(func(ctx context.Context, orderID string) (string, error) {
		if during != nil {
			return "refunded", nil // read during the first call only
		}
		var err error
		during, err = keystore("get", "-function", name, "-scope", "tenant-9", "-key", orderID)
		require.NoError(t, err)
		return "refunded", nil
	}, idempotency.FunctionConfig[string]{
		Store: store, Name: name,
		Key:      func(_ context.Context, orderID string) (string, error) { return orderID, nil },
		Scope:    func(context.Context, string) (string, error) { return "tenant-9", nil },
		Settings: quiet,
	})
	require.NoError(t, err)
	started = time.Now()
	_, err = refund(ctx, "ord-7")
	require.NoError(t, err)
	require.Equal(t, "in_progress", during["status"])
	require.Equal(t, name, during["function"])
	require.Equal(t, "tenant-9", during["scope"])
	require.Equal(t, "function_payload", during["request_hash_of"])
	userID, key, err := idempotency.FunctionRecordID("", name, "tenant-9", "ord-7")
	require.NoError(t, err)
	require.Equal(t, userID, during["user_id"])
	require.Equal(t, key, during["key"])
	requireTime(during, "created_at", started, time.Now())
	requireTime(during, "lease_until", started, time.Now().Add(idempotency.DefaultMaxLease))
	require.Equal(t, false, during["lease_expired"])
	require.NotContains(t, during, "subject")

	// The same call in a Lambda tenant is found with -tenant, and only so.
	tenantCtx := lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: uuid.NewString(), TenantID: "acme"})
	_, err = refund(tenantCtx, "ord-8")
	require.NoError(t, err)
	_, err = keystore("get", "-function", name, "-scope", "tenant-9", "-key", "ord-8")
	require.ErrorContains(t, err, "no record", "without its tenant the record is another's")
	rec, err = keystore("get", "-function", name, "-scope", "tenant-9", "-key", "ord-8", "-tenant", "acme")
	require.NoError(t, err)
	require.Equal(t, "completed", rec["status"])
	require.Equal(t, "acme", rec["tenant"])
	userID, _, err = idempotency.FunctionRecordID("", name, "tenant-9", "ord-8")
	require.NoError(t, err)
	require.Equal(t, idempotency.TenantUserID("acme", userID), rec["user_id"])
	_, err = keystore("get", "-user", userID, "-record-key", key, "-tenant", "acme")
	require.ErrorContains(t, err, "-tenant scopes -sub or -function")
}

// TestGetWithLogDigests: a handler that logs digests instead of keys and
// users (Settings.LogDigestSecret); support, given a customer's raw key
// and the secret, finds the record and the digests that its log lines
// carry.
func TestGetWithLogDigests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pgstore.Migrate(ctx, pool, nil)
		return err
	})
	secret := "0123456789abcdef0123456789abcdef-secret"
	var logs bytes.Buffer
	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{}`}, nil
	}, idempotency.Config{Store: must.Value(pgstore.New(db.Pool, nil)), Settings: idempotency.Settings{
		LogDigestSecret: []byte(secret), Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: io.Discard}})
	require.NoError(t, err)
	sub, key := "auth0|"+uuid.NewString(), uuid.NewString()
	req := events.APIGatewayV2HTTPRequest{RawPath: "/tasks", Body: `{}`, Headers: map[string]string{"idempotency-key": strings.ToUpper(key)}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}}}
	_, err = h(ctx, req)
	require.NoError(t, err)
	var line map[string]any
	require.NoError(t, json.Unmarshal(logs.Bytes(), &line), logs.String())
	require.NotContains(t, logs.String(), key)

	env := func(name string) string {
		switch name {
		case "DATABASE_URL":
			return db.URL
		case "LOG_SECRET":
			return secret
		}
		return ""
	}
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"get", "-sub", sub, "-key", strings.ToUpper(key), "-log-secret-env", "LOG_SECRET"}, &out, env))
	var rec map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rec), out.String())
	require.Equal(t, line["key"], rec["log_key"], "the digest of the key in the record's log line")
	require.Equal(t, line["user"], rec["log_user"])
	require.ErrorContains(t, run(ctx, []string{"get", "-sub", sub, "-key", key, "-log-secret-env", "NOPE"}, &out, env), "holds 0 bytes")
}
