package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeAPI is a small API of "things" for the checker to judge. Its zero
// value follows the contract; each field breaks one part of it.
type fakeAPI struct {
	// IgnoreKey creates a new thing on every POST, whatever the key.
	IgnoreKey bool
	// NoMarker replays without Idempotent-Replayed.
	NoMarker bool
	// PlainErrors answers refusals as application/json without a problem.
	PlainErrors bool
	// Slow holds each run this long, so that a duplicate finds it running.
	Slow time.Duration

	mu      sync.Mutex
	next    int
	records map[string]*record
	things  map[string]bool
}

type record struct {
	body     string
	done     bool
	status   int
	response []byte
	location string
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func (f *fakeAPI) refuse(w http.ResponseWriter, status int, code string) {
	if f.PlainErrors {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":%q}`, code)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": code, "status": status, "detail": code, "code": code})
}

func (f *fakeAPI) create() (int, []byte, string) {
	f.mu.Lock()
	f.next++
	id := fmt.Sprintf("t%d", f.next)
	f.things[id] = true
	f.mu.Unlock()
	time.Sleep(f.Slow)
	return http.StatusCreated, []byte(fmt.Sprintf(`{"id":%q}`, id)), "/things/" + id
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/things/"):
		f.mu.Lock()
		delete(f.things, strings.TrimPrefix(r.URL.Path, "/things/"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/things":
		http.NotFound(w, r)
		return
	}
	answer := func(status int, b []byte, loc string, replayed bool) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", loc)
		if replayed && !f.NoMarker {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	if f.IgnoreKey {
		status, b, loc := f.create()
		answer(status, b, loc, false)
		return
	}
	key, sentKey := r.Header["Idempotency-Key"]
	switch {
	case !sentKey:
		f.refuse(w, http.StatusBadRequest, "idempotency_key_missing")
		return
	case !uuidV4.MatchString(key[0]):
		f.refuse(w, http.StatusBadRequest, "idempotency_key_invalid")
		return
	}
	f.mu.Lock()
	rec, found := f.records[key[0]]
	if !found {
		rec = &record{body: string(body)}
		f.records[key[0]] = rec
	}
	f.mu.Unlock()
	if found {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case rec.body != string(body):
			f.refuse(w, http.StatusUnprocessableEntity, "idempotency_key_reused")
		case !rec.done:
			w.Header().Set("Retry-After", "1")
			f.refuse(w, http.StatusConflict, "idempotency_key_in_use")
		default:
			answer(rec.status, rec.response, rec.location, true)
		}
		return
	}
	status, b, loc := f.create()
	f.mu.Lock()
	rec.done, rec.status, rec.response, rec.location = true, status, b, loc
	f.mu.Unlock()
	answer(status, b, loc, false)
}

func (f *fakeAPI) start(t *testing.T) *httptest.Server {
	f.records, f.things = map[string]*record{}, map[string]bool{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

func (f *fakeAPI) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.things)
}

// verdicts runs the checker's command line against base and returns the
// verdict of each check by name, and its exit status.
func verdicts(t *testing.T, base string, extra ...string) (map[string]Verdict, int, string) {
	t.Helper()
	args := append([]string{"-url", base, "-path", "/things", "-body", `{"name":"{{unique}}"}`,
		"-H", "Authorization: Bearer ${FAKE_TOKEN}", "-problem", "ichido", "-delete-created", "-timeout", "5s"}, extra...)
	var out, errOut bytes.Buffer
	code, err := run(context.Background(), args, func(k string) string {
		return map[string]string{"FAKE_TOKEN": "t0k3n"}[k]
	}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	t.Log("\n" + out.String())
	got := map[string]Verdict{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "PASS" || f[0] == "FAIL" || f[0] == "SKIP") {
			got[f[1]] = Verdict(f[0])
		}
	}
	return got, code, out.String()
}

// TestFakeServers: the checker passes an API that keeps the contract, and
// fails exactly the checks an API breaks.
func TestFakeServers(t *testing.T) {
	t.Parallel()
	all := func(v Verdict) map[string]Verdict {
		return map[string]Verdict{checkFirst: v, checkReplay: v, checkMismatch: v, checkConcur: v, checkMissing: v, checkMalformed: v, checkCleanup: Pass}
	}
	with := func(m map[string]Verdict, kv ...any) map[string]Verdict {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(Verdict)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		api   *fakeAPI
		extra []string
		want  map[string]Verdict
		why   map[string]string // a check's line must contain this
	}{
		{name: "keeps the contract", api: &fakeAPI{}, want: all(Pass)},
		{name: "keeps the contract, slow: the duplicate gets 409", api: &fakeAPI{Slow: 300 * time.Millisecond}, want: all(Pass),
			why: map[string]string{checkConcur: "got 409 Retry-After: 1"}},
		{
			name: "not idempotent: a new thing on every POST, the key ignored",
			api:  &fakeAPI{IgnoreKey: true, Slow: 50 * time.Millisecond},
			want: with(all(Fail), checkFirst, Pass),
			why: map[string]string{
				checkReplay:    "another body (the request ran again?)",
				checkMismatch:  "not 422",
				checkConcur:    "different 2xx answers: the request ran more than once",
				checkMissing:   "not 400",
				checkMalformed: "not 400",
			},
		},
		{
			name: "replays without the marker", api: &fakeAPI{NoMarker: true},
			want: with(all(Pass), checkReplay, Fail),
			why:  map[string]string{checkReplay: "no Idempotent-Replayed: true"},
		},
		{
			name: "replays without the marker, none configured", api: &fakeAPI{NoMarker: true},
			extra: []string{"-replay-header", ""}, want: all(Pass),
			why: map[string]string{checkReplay: "no replay marker checked"},
		},
		{
			name: "refusals that are not problems", api: &fakeAPI{PlainErrors: true, Slow: 300 * time.Millisecond},
			want: with(all(Fail), checkFirst, Pass, checkReplay, Pass),
			why:  map[string]string{checkMismatch: "not application/problem+json", checkConcur: "not application/problem+json"},
		},
		{
			name: "refusals that are not problems, status alone checked", api: &fakeAPI{PlainErrors: true},
			extra: []string{"-problem", "off"}, want: all(Pass),
		},
		{
			name: "a missing key allowed where the API requires one", api: &fakeAPI{},
			extra: []string{"-missing-key", "allow"}, want: with(all(Pass), checkMissing, Fail),
			why: map[string]string{checkMissing: "want 2xx"},
		},
		{
			name: "no malformed key to send", api: &fakeAPI{},
			extra: []string{"-malformed-key", ""}, want: with(all(Pass), checkMalformed, Skip),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := tc.api.start(t)
			got, code, out := verdicts(t, srv.URL, tc.extra...)
			require.Equal(t, tc.want, got, out)
			wantCode := 0
			for _, v := range tc.want {
				if v == Fail {
					wantCode = 1
				}
			}
			require.Equal(t, wantCode, code, out)
			for check, text := range tc.why {
				require.Regexp(t, `(?m)^\w+\s+`+regexp.QuoteMeta(check)+`\s+.*`+regexp.QuoteMeta(text), out)
			}
			require.Zero(t, tc.api.left(), "every thing the checks created is deleted:\n%s", out)
		})
	}
}

// TestUnreachable: a first request that cannot be made fails, and the
// checks that need its answer say why they were skipped.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	got, code, out := verdicts(t, srv.URL)
	require.Equal(t, 1, code)
	require.Equal(t, Fail, got[checkFirst], out)
	require.Equal(t, Skip, got[checkReplay], out)
	require.Contains(t, out, "the first request did not succeed")
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-path", "/x"},
		{"-url", "ftp://x", "-path", "/x"},
		{"-url", "http://x", "-path", "x"},
		{"-url", "http://x", "-path", "/x", "-problem", "yes"},
		{"-url", "http://x", "-path", "/x", "-missing-key", "maybe"},
		{"-url", "http://x", "-path", "/x", "-concurrent", "1"},
		{"-url", "http://x", "-path", "/x", "-H", "no colon"},
		{"-url", "http://x", "-path", "/x", "-H", "Authorization: Bearer ${UNSET_TOKEN}"},
	} {
		code, err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
		require.Equal(t, 2, code, args)
		require.Error(t, err, args)
	}
}
