package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/localapi"
)

// TestLocalAPI runs every check against the task API as `make run` serves
// it, with ichido's problem format: each one passes.
func TestLocalAPI(t *testing.T) {
	t.Parallel()
	base := apptest.StartLocalAPI(t, apptest.Build(t, "./cmd/localapi"), apptest.New(t))
	tok, err := localapi.NewToken(localapi.TokenOptions{Subject: uuid.NewString()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := Run(ctx, Config{
		BaseURL:       base,
		Path:          "/tasks",
		Body:          `{"title":"idemcheck {{unique}}"}`,
		Header:        map[string][]string{"Authorization": {"Bearer " + tok}, "Content-Type": {"application/json"}},
		ReplayHeader:  "Idempotent-Replayed",
		ReplayValue:   "true",
		Problem:       ProblemIchido,
		MalformedKey:  "not-a-uuid",
		Concurrent:    3,
		RetryAfter:    true,
		DeleteCreated: true,
	})
	var out bytes.Buffer
	code := Print(&out, results)
	t.Log("\n" + out.String())
	require.Len(t, results, 7)
	for _, r := range results {
		require.Equal(t, Pass, r.Verdict, "%s: %s", r.Name, r.Why)
	}
	require.Zero(t, code)
}
