package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
)

// TestLocalSmoke runs what `make smoke` runs without a stack against the
// task API as `make run` serves it (on a schema of the test's own): every
// check that does not need AWS passes, and those that do are skipped with
// their reason, never silently.
func TestLocalSmoke(t *testing.T) {
	t.Parallel()
	bin := apptest.Build(t, "./cmd/idemcheck", "./cmd/smoke", "./cmd/localapi", "./cmd/localqueue")
	db := apptest.New(t)
	base := apptest.StartLocalAPI(t, bin, db)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "smoke"), "-bin", bin, "-url", base, "-database-url", db.URL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Log("\n" + out.String())
	require.NoError(t, err, "make smoke fails against the local API")
	for _, check := range []string{"first-request", "replay", "mismatch", "concurrent", "missing-key", "malformed-key", "sqs-once", "purge-job"} {
		require.Regexp(t, `(?m)^PASS\s+`+check+`\s`, out.String())
	}
	require.Regexp(t, `(?m)^SKIP\s+stack\s+no stack given`, out.String(), "the parts that need AWS say why they are skipped")
	require.Regexp(t, `smoke: \d+ passed, 0 failed`, out.String())
}
