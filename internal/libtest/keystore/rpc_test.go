package keystore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestGetFindsAnRPCRecordBySubject: a gRPC or Connect call's record, in a
// key store that lives outside the connection's search_path, is found by
// -function rpc -sub -key (with -issuer and -tenant), the schema read from
// IDEMPOTENCY_SCHEMA as the library reads it; without the schema, the
// error says to pass -schema.
func TestGetFindsAnRPCRecordBySubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	schema := "idem_" + db.Schema
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, schema) })
	_, err = pgstore.Migrate(ctx, db.Pool, &pgstore.MigrateOptions{Schema: schema, Cron: pgstore.CronOff})
	require.NoError(t, err)
	store := must.Value(pgstore.New(db.Pool, &pgstore.Options{Schema: schema}))

	issuer, sub, tenant := "https://login.example.com/", "auth0|6543210fedcba", "acme"
	key := uuid.NewString()
	// The record as the interceptor keeps it (grpcidem.RecordID), in the
	// tenant's space.
	userID, recordKey, err := grpcidem.RecordID("", idempotency.KeyUUIDv4, idempotency.IssuerSubject(issuer, sub), key)
	require.NoError(t, err)
	userID = idempotency.TenantUserID(tenant, userID)
	now := time.Now()
	ref := idemstore.Ref{UserID: userID, Key: recordKey, Owner: "o"}
	res, err := store.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "f", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Claimed)

	env := map[string]string{"DATABASE_URL": db.URL, "IDEMPOTENCY_SCHEMA": schema}
	getenv := func(name string) string { return env[name] }
	args := []string{"get", "-function", grpcidem.Name, "-sub", sub, "-issuer", issuer, "-tenant", tenant, "-key", key}
	var out bytes.Buffer
	require.NoError(t, run(ctx, args, &out, getenv))
	var rec map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rec))
	require.Equal(t, userID, rec["user_id"])
	require.Equal(t, recordKey, rec["key"])
	require.Equal(t, "in_progress", rec["status"])
	require.Equal(t, sub, rec["subject"])
	require.Equal(t, grpcidem.Name, rec["function"])

	// The same key in upper case is the same key, as the interceptor reads it.
	out.Reset()
	upper := slices.Clone(args)
	upper[len(upper)-1] = strings.ToUpper(key)
	require.NoError(t, run(ctx, upper, &out, getenv))

	delete(env, "IDEMPOTENCY_SCHEMA")
	err = run(ctx, args, &out, getenv)
	require.ErrorContains(t, err, "-schema")

	for _, help := range [][]string{{"help"}, {"-h"}} {
		out.Reset()
		require.NoError(t, run(ctx, help, &out, getenv))
		for _, cmd := range []string{"get", "list", "delete", "user-id", "-sql"} {
			require.Contains(t, out.String(), cmd, "keystore %v lists %s", help, cmd)
		}
	}
}
