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

// fakeAPI is a small API of "things" for the checker to judge, over real
// HTTP. Its zero value keeps the contract; each field breaks one rule of
// it. POST /things creates a thing, DELETE /things/{id} deletes one (both
// protected), GET /count answers how many protected requests ran, and POST
// /made makes a thing for a DELETE to act on, unprotected and unbroken.
// The caller's Authorization header is its user.
type fakeAPI struct {
	// Rerun runs every request, whatever its key.
	Rerun bool
	// SameAnswer answers every run with the same bytes (a POST without a
	// Location, a DELETE 204 whether the thing was there or not), so that a
	// re-run looks like a replay.
	SameAnswer bool
	// WrongMarker marks first runs as replays.
	WrongMarker bool
	// No422 replays the first answer to the same key with another request.
	No422 bool
	// No409 runs a duplicate that arrives while the first runs.
	No409 bool
	// SharedKeys keeps one record per key for all users.
	SharedKeys bool
	// RefuseQuoted answers 400 to a key sent as an sf-string.
	RefuseQuoted bool
	// PlainErrors answers refusals as application/json without a problem.
	PlainErrors bool

	mu      sync.Mutex
	next    int
	runs    int
	records map[string]*record
	things  map[string]bool
}

type record struct {
	fingerprint string
	done        bool
	status      int
	response    []byte
	location    string
	duplicate   chan struct{} // closed when a duplicate arrives while it runs
	once        sync.Once
}

// hold is the longest a run waits for a duplicate to arrive while it runs,
// so that the concurrent check's duplicates meet it in flight.
const hold = 300 * time.Millisecond

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

// run does the work of one request: create a thing, or delete one.
func (f *fakeAPI) run(method, path string) (int, []byte, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs++
	if method == http.MethodDelete {
		id := strings.TrimPrefix(path, "/things/")
		if !f.things[id] && !f.SameAnswer {
			return http.StatusNotFound, []byte(`{"error":"no such thing"}`), ""
		}
		delete(f.things, id)
		return http.StatusNoContent, nil, ""
	}
	f.next++
	id := fmt.Sprintf("t%d", f.next)
	f.things[id] = true
	if f.SameAnswer {
		return http.StatusOK, []byte(`{"ok":true}`), ""
	}
	return http.StatusCreated, []byte(fmt.Sprintf(`{"id":%q}`, id)), "/things/" + id
}

// parseKey reads a bare or quoted key; ok is false for a malformed one.
func (f *fakeAPI) parseKey(v string) (key string, quoted, ok bool) {
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", true, false
		}
		v, quoted = v[1:len(v)-1], true
	}
	return v, quoted, uuidV4.MatchString(v)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/count":
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprintf(w, `{"count":%d}`, f.runs)
		return
	case r.Method == http.MethodGet && r.URL.Path == "/things":
		w.WriteHeader(http.StatusOK)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/made":
		f.mu.Lock()
		defer f.mu.Unlock()
		f.next++
		id := fmt.Sprintf("t%d", f.next)
		f.things[id] = true
		w.Header().Set("Location", "/things/"+id)
		w.WriteHeader(http.StatusCreated)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/things":
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/things/"):
	default:
		http.NotFound(w, r)
		return
	}
	answer := func(status int, b []byte, loc string, replayed bool) {
		if len(b) > 0 {
			w.Header().Set("Content-Type", "application/json")
		}
		if loc != "" {
			w.Header().Set("Location", loc)
		}
		if replayed != f.WrongMarker {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	values, sentKey := r.Header["Idempotency-Key"]
	if !sentKey {
		f.refuse(w, http.StatusBadRequest, "idempotency_key_missing")
		return
	}
	key, quoted, ok := f.parseKey(values[0])
	if !ok || (quoted && f.RefuseQuoted) {
		f.refuse(w, http.StatusBadRequest, "idempotency_key_invalid")
		return
	}
	if f.Rerun {
		status, b, loc := f.run(r.Method, r.URL.Path)
		answer(status, b, loc, false)
		return
	}
	id := r.Header.Get("Authorization") + " " + key
	if f.SharedKeys {
		id = key
	}
	fingerprint := r.Method + " " + r.URL.Path + " " + string(body)
	f.mu.Lock()
	rec, found := f.records[id]
	if !found {
		rec = &record{fingerprint: fingerprint, duplicate: make(chan struct{})}
		f.records[id] = rec
	}
	f.mu.Unlock()
	if found {
		f.mu.Lock()
		switch {
		case rec.fingerprint != fingerprint && !(f.No422 && rec.done):
			f.mu.Unlock()
			f.refuse(w, http.StatusUnprocessableEntity, "idempotency_key_reused")
		case !rec.done && f.No409:
			f.mu.Unlock()
			rec.once.Do(func() { close(rec.duplicate) })
			status, b, loc := f.run(r.Method, r.URL.Path)
			answer(status, b, loc, false)
		case !rec.done:
			f.mu.Unlock()
			rec.once.Do(func() { close(rec.duplicate) })
			w.Header().Set("Retry-After", "1")
			f.refuse(w, http.StatusConflict, "idempotency_key_in_use")
		default:
			status, b, loc := rec.status, rec.response, rec.location
			f.mu.Unlock()
			answer(status, b, loc, true)
		}
		return
	}
	status, b, loc := f.run(r.Method, r.URL.Path)
	select { // the run lasts until a duplicate meets it, or hold
	case <-rec.duplicate:
		time.Sleep(20 * time.Millisecond) // let the duplicate's answer go first
	case <-time.After(hold):
	case <-r.Context().Done():
	}
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
// verdict of each check by name, its exit status and its output.
func verdicts(t *testing.T, base string, extra ...string) (map[string]Verdict, int, string) {
	t.Helper()
	args := append([]string{"-url", base, "-path", "/things", "-body", `{"name":"{{unique}}"}`,
		"-H", "Authorization: Bearer ${FAKE_TOKEN}", "-timeout", "10s"}, extra...)
	var out, errOut bytes.Buffer
	code, err := run(context.Background(), args, func(k string) string {
		return map[string]string{"FAKE_TOKEN": "t0k3n", "FAKE_TOKEN2": "an0th3r"}[k]
	}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	got := map[string]Verdict{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "PASS" || f[0] == "FAIL" || f[0] == "SKIP") {
			got[f[1]] = Verdict(f[0])
		}
	}
	return got, code, out.String()
}

// flagSets are the flag combinations every fake server is judged under:
// the problem formats, a marker or none, a counter or none, more
// duplicates, no Retry-After required, and DELETE. Each gives a second
// user's credentials, which the per-user check needs.
func flagSets(base string) map[string][]string {
	user2 := []string{"-H2", "Authorization: Bearer ${FAKE_TOKEN2}"}
	return map[string][]string{
		"ichido problems":              append([]string{"-problem", "ichido", "-delete-created"}, user2...),
		"status alone":                 append([]string{"-problem", "off"}, user2...),
		"rfc9457, no marker checked":   append([]string{"-problem", "rfc9457", "-replay-header", ""}, user2...),
		"marker by name, no malformed": append([]string{"-replay-header", "Idempotent-Replayed", "-malformed-key", ""}, user2...),
		"four at once, no Retry-After": append([]string{"-concurrent", "4", "-retry-after=false", "-bursts", "3"}, user2...),
		"a run counter":                append([]string{"-count-url", base + "/count", "-problem", "off", "-replay-header", ""}, user2...),
		"DELETE": append([]string{"-method", "DELETE", "-create-path", "/made", "-create-body", `{"name":"{{unique}}"}`,
			"-body", "", "-problem", "ichido"}, user2...),
	}
}

// TestKeepsTheContract: an API that keeps the contract passes every check
// under every flag set, the concurrent check among them with a 409 that
// shows its duplicates met the first run.
func TestKeepsTheContract(t *testing.T) {
	t.Parallel()
	for name := range flagSets("") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := &fakeAPI{}
			srv := api.start(t)
			got, code, out := verdicts(t, srv.URL, flagSets(srv.URL)[name]...)
			require.Zero(t, code, out)
			for check, v := range got {
				if check == checkMalformed && v == Skip {
					continue
				}
				require.Equal(t, Pass, v, "%s:\n%s", check, out)
			}
			require.Regexp(t, `(?m)^PASS\s+concurrent\s+.*got 409 while the first ran`, out)
			if strings.Contains(name, "ichido") {
				require.Zero(t, api.left(), "every thing the checks created is deleted:\n%s", out)
			}
		})
	}
}

// TestBrokenServersFail: each fake server breaks one rule, and the checker
// fails it under every flag set, on the check of that rule.
func TestBrokenServersFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  func() *fakeAPI
		// failing lists the checks of the rule; at least one must fail.
		failing []string
	}{
		{"re-runs every request, a new thing each time", func() *fakeAPI { return &fakeAPI{Rerun: true} }, []string{checkReplay}},
		{"re-runs every request, the same answer each time", func() *fakeAPI { return &fakeAPI{Rerun: true, SameAnswer: true} }, []string{checkRerun, checkReplay}},
		{"marks first runs as replays", func() *fakeAPI { return &fakeAPI{WrongMarker: true} }, []string{checkFirst}},
		{"replays a reused key's first answer instead of 422", func() *fakeAPI { return &fakeAPI{No422: true} }, []string{checkMismatch}},
		{"runs a duplicate that arrives while the first runs", func() *fakeAPI { return &fakeAPI{No409: true} }, []string{checkConcur}},
		{"shares keys across users", func() *fakeAPI { return &fakeAPI{SharedKeys: true} }, []string{checkUsers}},
		{"refuses the draft's quoted key", func() *fakeAPI { return &fakeAPI{RefuseQuoted: true} }, []string{checkQuoted}},
	} {
		for flags := range flagSets("") {
			t.Run(tc.name+"/"+flags, func(t *testing.T) {
				t.Parallel()
				srv := tc.api().start(t)
				got, code, out := verdicts(t, srv.URL, flagSets(srv.URL)[flags]...)
				require.Equal(t, 1, code, out)
				failed := false
				for _, check := range tc.failing {
					failed = failed || got[check] == Fail
				}
				require.True(t, failed, "one of %v fails:\n%s", tc.failing, out)
			})
		}
	}
}

// TestRefusalFormats: the refusals' format is checked as -problem says.
func TestRefusalFormats(t *testing.T) {
	t.Parallel()
	srv := (&fakeAPI{PlainErrors: true}).start(t)
	got, code, out := verdicts(t, srv.URL, "-problem", "rfc9457")
	require.Equal(t, 1, code, out)
	require.Equal(t, Fail, got[checkMismatch], out)
	require.Contains(t, out, "not application/problem+json")
	got, code, out = verdicts(t, srv.URL, "-problem", "off")
	require.Zero(t, code, out)
	require.Equal(t, Pass, got[checkMismatch], out)
	require.Equal(t, Skip, got[checkUsers], out)
	require.Contains(t, out, "no second user's credentials (-H2)")
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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-path", "/x"}, "-url"},
		{[]string{"-url", "ftp://x", "-path", "/x"}, "-url"},
		{[]string{"-url", "http://x", "-path", "x"}, "-path"},
		{[]string{"-url", "http://x", "-path", "/x", "-problem", "yes"}, "-problem"},
		{[]string{"-url", "http://x", "-path", "/x", "-missing-key", "maybe"}, "-missing-key"},
		{[]string{"-url", "http://x", "-path", "/x", "-concurrent", "1"}, "-concurrent"},
		{[]string{"-url", "http://x", "-path", "/x", "-bursts", "0"}, "-bursts"},
		{[]string{"-url", "http://x", "-path", "/x", "-H", "no colon"}, "not 'Name: value'"},
		{[]string{"-url", "http://x", "-path", "/x", "-H", "Authorization: Bearer ${UNSET_TOKEN}"}, "UNSET_TOKEN"},
		{[]string{"-url", "http://x", "-path", "/x", "-H2", "Authorization: Bearer ${UNSET_TOKEN}"}, "UNSET_TOKEN"},
		{[]string{"-url", "http://x", "-path", "/x", "-H", "Idempotency-Key: 1"}, "idemcheck sends itself"},
		{[]string{"-url", "http://x", "-path", "/x", "-method", "DELETE"}, "-create-path"},
		{[]string{"-url", "http://x", "-path", "/x", "-count-url", "count"}, "-count-url"},
	} {
		code, err := run(context.Background(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
		require.Equal(t, 2, code, tc.args)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}
