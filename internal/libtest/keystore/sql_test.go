package keystore_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestWriteSQL: -sql DIR writes every migration Migrate applies, byte for
// byte, and -sql - prints them all in order, with no database.
func TestWriteSQL(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(pgstore.Migrations(), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	noEnv := func(string) string { return "" }

	dir := filepath.Join(t.TempDir(), "idempotency")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-sql", dir}, &out, noEnv))
	written, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, written, len(names))
	var printed bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-sql", "-"}, &printed, noEnv))
	last := -1
	for _, name := range names {
		want, err := fs.ReadFile(pgstore.Migrations(), name)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s as Migrate applies it", name)
		require.Contains(t, out.String(), "wrote "+filepath.Join(dir, name))

		at := strings.Index(printed.String(), "-- keystore: "+name+"\n"+string(want))
		require.Greater(t, at, last, "%s printed whole, after the one before it", name)
		last = at
	}
	require.Contains(t, out.String(), "purge_expired_idempotency_keys()", "says how to schedule the purge")
	for _, line := range strings.Split(printed.String()[:strings.Index(printed.String(), "-- keystore: ")], "\n") {
		require.True(t, line == "" || strings.HasPrefix(line, "-- "), "the advice before the files is SQL comments: %q", line)
	}
}

// TestPrintedSQLMakesTheStore: what -sql - prints, applied by hand in an
// empty schema as another migration tool would, is a key store that passes
// the store conformance suite.
func TestPrintedSQLMakesTheStore(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	var printed bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-sql", "-"}, &printed, func(string) string { return "" }))
	_, err := db.Pool.Exec(context.Background(), printed.String())
	require.NoError(t, err)

	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
		return must.Value(pgstore.New(db.Pool, &pgstore.Options{Schema: db.Schema}))
	}})
}
