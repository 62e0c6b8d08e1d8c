package main

import (
	"log"
	"net/http"
	"strings"
	"testing"

	"github.com/ichido/ichido/pkg/idempotency"
)

// fingerprintBody is a JSON array of zeros of about n bytes: the shape
// that made canonicalisation allocate the most per byte of body.
func fingerprintBody(n int) string {
	if n < 2 {
		return "[]"
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for b.Len() < n-2 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteByte('0')
	}
	b.WriteByte(']')
	return b.String()
}

// fingerprint measures idempotency.Fingerprint through its public API only,
// so that whichever implementation is built is the one measured.
func (b *bench) fingerprint() error {
	res := &FingerprintResult{}
	b.res.Fingerprint = res
	for _, sz := range []struct {
		label string
		n     int
	}{{"1 KB", 1 << 10}, {"64 KB", 64 << 10}, {"6 MB", 6 << 20}} {
		req := idempotency.Request{
			Version: 2, Method: http.MethodPost, Path: "/tasks",
			Headers: map[string][]string{"content-type": {"application/json"}},
			Body:    fingerprintBody(sz.n),
		}
		var ferr error
		r := testing.Benchmark(func(tb *testing.B) {
			tb.ReportAllocs()
			for tb.Loop() {
				if _, err := idempotency.Fingerprint(req); err != nil {
					ferr = err
				}
			}
		})
		if ferr != nil {
			return ferr
		}
		fs := FingerprintSize{
			Label: sz.label, BodyBytes: len(req.Body),
			AllocsPerOp: r.AllocsPerOp(), BytesPerOp: r.AllocedBytesPerOp(), NsPerOp: r.NsPerOp(),
		}
		fs.BytesOverIn = float64(fs.BytesPerOp) / float64(fs.BodyBytes)
		log.Printf("  fingerprint %s: %d allocs, %d B (%.1f× the body), %.3f ms per call", sz.label, fs.AllocsPerOp, fs.BytesPerOp, fs.BytesOverIn, float64(fs.NsPerOp)/1e6)
		res.Sizes = append(res.Sizes, fs)
	}
	return nil
}
