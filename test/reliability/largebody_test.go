package reliability

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// functionMemory is the MemorySize of the task functions (template.yaml).
const functionMemory = 256 << 20

// largeBody returns a JSON body of about size bytes: item repeated in an
// array or object (# is replaced by a counter).
func largeBody(size int, open, item, end string) []byte {
	var b strings.Builder
	b.Grow(size)
	b.WriteString(open)
	for i := 0; b.Len() < size-len(end)-2*len(item)-16; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.ReplaceAll(item, "#", strconv.Itoa(i)))
	}
	b.WriteString(end)
	return []byte(b.String())
}

// TestLargeBodiesUnderTheFunctionMemory sends bodies as large as a Lambda
// invocation allows to a worker process held to the functions' 256 MiB
// (GOMEMLIMIT), in the shapes that are the most costly to fingerprint. Each
// is fingerprinted and claimed, the handler answers its own 413 (its limit
// is 64 KiB), and the retry replays it; a body over the decorator's
// MaxBodyBytes is refused before the claim. The process's peak resident
// set stays below the functions' memory.
func TestLargeBodiesUnderTheFunctionMemory(t *testing.T) {
	t.Parallel()
	rounds := scale(1, 5)
	db := apptest.New(t)
	w := startWorker(t, modeSpy, workerEnv(db.URL, map[string]string{"GOMEMLIMIT": "256MiB"}))
	idle := w.stats(t, true)

	size := idempotency.DefaultMaxBodyBytes - 4<<10 // room for the event around the body
	shapes := []struct {
		name string
		body []byte
	}{
		{"[0,0,…]", largeBody(size, "[", "0", "]")},
		{"[{},{},…]", largeBody(size, "[", "{}", "]")},
		{"one object of numbered members", largeBody(size, "{", `"k#":#`, "}")},
		{"nested objects out of order", largeBody(size, `{"z":{`, `"k#":{"y":#,"x":[#]}`, `},"a":0}`)},
	}
	user := newUser()
	var requests int
	for round := range rounds {
		for _, s := range shapes {
			c := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, body: s.body, sub: user}
			first := do(t, w.URL, c)
			require.Equal(t, http.StatusRequestEntityTooLarge, first.status, "round %d, %s: %s", round, s.name, first.body)
			require.Equal(t, idempotency.CodePayloadTooLarge, first.problem(t).Code)
			require.False(t, first.replayed())
			again := do(t, w.URL, c)
			require.Equal(t, http.StatusRequestEntityTooLarge, again.status)
			require.True(t, again.replayed(), "the handler's 413 is the key's answer")
			require.Equal(t, first.body, again.body)
			requests += 2
		}
	}
	oversized := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()},
		body: largeBody(idempotency.DefaultMaxBodyBytes+64<<10, "[", "0", "]"), sub: user}
	refused := do(t, w.URL, oversized)
	requests++
	require.Equal(t, http.StatusRequestEntityTooLarge, refused.status)
	require.Equal(t, idempotency.CodePayloadTooLarge, refused.problem(t).Code)

	st := w.stats(t, false)
	require.Zero(t, st.Runs["POST "+oversized.keys[0]], "the decorator refused the oversized body before the handler")
	require.Equal(t, rounds*len(shapes), countRows(t, db.Pool).Keys, "one key per fingerprinted body, none for the oversized one")
	require.NotZero(t, st.PeakRSS, "no /proc: the peak resident set cannot be read")
	require.Less(t, st.PeakRSS, uint64(functionMemory), "the worker's peak resident set exceeded the functions' memory")

	names := make([]string, len(shapes))
	for i, s := range shapes {
		names[i] = s.name
	}
	mib := func(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
	record(t, Result{
		Case: "large bodies under a 256 MiB memory limit",
		Tried: fmt.Sprintf("a worker process with GOMEMLIMIT=256MiB (the functions' MemorySize) gets POSTs of %.1f MiB JSON bodies (%s), each sent twice under its key, and one body over MaxBodyBytes (6 MiB)",
			float64(size)/(1<<20), strings.Join(names, ", ")),
		Times: requests,
		Seen: fmt.Sprintf("each body fingerprinted and claimed, the handler's 413 stored and replayed byte for byte; the oversized body refused with 413 payload_too_large before the claim (no handler run, no key); peak resident set %s (idle %s), below 256 MiB; heap in use %s after the run",
			mib(st.PeakRSS), mib(idle.PeakRSS), mib(st.HeapInuse)),
		Lost: "nothing",
	})
}
