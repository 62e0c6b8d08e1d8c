package idempotency

import (
	"encoding/base64"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sixMB is the size of the bodies the memory bound is checked with: the
// most a Lambda function is handed in one invocation.
const sixMB = 6 << 20

// largeBodies are 6 MB bodies of the shapes that cost most to canonicalise.
func largeBodies() map[string]Request {
	// fillTo repeats item (# replaced by a zero-padded counter, @ by a
	// plain one) between open and end up to size bytes.
	fillTo := func(size int, open, item, sep, end string) string {
		var b strings.Builder
		b.Grow(size)
		b.WriteString(open)
		for i := 0; b.Len() < size-len(end)-2*len(item)-len(sep)-32; i++ {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(item, "#", fmt.Sprintf("%07d", i)), "@", strconv.Itoa(i)))
		}
		b.WriteString(end)
		return b.String()
	}
	fill := func(open, item, sep, end string) string { return fillTo(sixMB, open, item, sep, end) }
	post := func(body string) Request { return Request{Method: "POST", Path: "/tasks", Body: body} }
	b64 := post(base64.StdEncoding.EncodeToString([]byte(fillTo(sixMB*3/4, "{", `"k#":"v"`, ",", "}"))))
	b64.IsBase64Encoded = true
	return map[string]Request{
		"array of zeros":                 post(fill("[", "0", ",", "]")),
		"array of empty objects":         post(fill("[", "{}", ",", "]")),
		"flat object, members in order":  post(fill("{", `"k#":0`, ",", "}")),
		"object of objects out of order": post(fill(`{"z":{`, `"k#":{"y":@,"x":"#"}`, ",", `},"a":0}`)),
		"nested object out of order":     post(fill(`{"z":0,"b":{"c":{`, `"k#":[@]`, ",", `},"a":1},"a":1}`)),
		"members out of order":           post(fill(`{`, `"k@":@`, ",", `}`)),
		"one long string":                post(`{"title":"` + strings.Repeat("x", sixMB-13) + `"}`),
		"base64 text of an object":       b64,
	}
}

// TestFingerprintMemoryIsBoundedByTheBody checks that fingerprinting a 6 MB
// body allocates at most three times its size in all: an upper bound on the
// heap's growth, whatever the collector does meanwhile. It measures the
// process's allocation counter, so it runs alone, before the parallel tests
// (no t.Parallel).
func TestFingerprintMemoryIsBoundedByTheBody(t *testing.T) {
	for name, req := range largeBodies() {
		require.GreaterOrEqual(t, len(req.Body), sixMB-64, name)
		require.LessOrEqual(t, len(req.Body), sixMB, name)
		_, err := Fingerprint(req) // warm up: lazily built tables, code pages
		require.NoError(t, err)

		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		h, err := Fingerprint(req)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Len(t, h, 64)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%-32s %5.2f× the body (%d bytes allocated)", name, float64(allocated)/float64(len(req.Body)), allocated)
		require.LessOrEqual(t, allocated, uint64(3*len(req.Body)), "%s: fingerprinting allocated %.1f× the body", name, float64(allocated)/float64(len(req.Body)))
	}
}

func BenchmarkFingerprint(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, sixMB} {
		var body strings.Builder
		body.WriteString(`{"items":[`)
		for i := 0; body.Len() < size-64; i++ {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"title":"task %d","done":false,"tags":["a","b"]}`, i)
		}
		body.WriteString(`],"title":"bench"}`)
		req := Request{Method: "POST", Path: "/tasks", Body: body.String()}
		b.Run(fmt.Sprintf("body=%dKiB", size>>10), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req.Body)))
			for b.Loop() {
				if _, err := Fingerprint(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
