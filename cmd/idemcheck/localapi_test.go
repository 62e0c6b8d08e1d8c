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
// it, with ichido's problem format and two users: each one passes, the
// concurrent check with a duplicate that met the first run. POST /tasks
// and DELETE /tasks/{id} are both checked.
func TestLocalAPI(t *testing.T) {
	t.Parallel()
	base := apptest.StartLocalAPI(t, apptest.Build(t, "./cmd/localapi"), apptest.New(t))
	tok, err := localapi.NewToken(localapi.TokenOptions{Subject: uuid.NewString()})
	require.NoError(t, err)
	tok2, err := localapi.NewToken(localapi.TokenOptions{Subject: uuid.NewString()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, method := range []string{"POST", "DELETE"} {
		cfg := Config{
			BaseURL:       base,
			Method:        method,
			Path:          "/tasks",
			Body:          `{"title":"idemcheck {{unique}}"}`,
			Header:        map[string][]string{"Authorization": {"Bearer " + tok}, "Content-Type": {"application/json"}},
			OtherUser:     map[string][]string{"Authorization": {"Bearer " + tok2}},
			ReplayHeader:  "Idempotent-Replayed",
			ReplayValue:   "true",
			Problem:       ProblemIchido,
			MalformedKey:  DefaultMalformedKey,
			Concurrent:    3,
			RetryAfter:    true,
			DeleteCreated: true,
		}
		if method == "DELETE" {
			cfg.Body, cfg.CreatePath, cfg.CreateBody = "", "/tasks", `{"title":"idemcheck {{unique}}"}`
		}
		results := Run(ctx, cfg)
		var out bytes.Buffer
		code := Print(&out, results)
		t.Log(method + "\n" + out.String())
		require.Len(t, results, 10)
		for _, r := range results {
			require.Equal(t, Pass, r.Verdict, "%s %s: %s", method, r.Name, r.Why)
		}
		require.Zero(t, code)
	}
}
