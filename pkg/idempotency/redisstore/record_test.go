package redisstore

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

func allBytes() string {
	var b strings.Builder
	for i := range 256 {
		b.WriteByte(byte(i))
	}
	return b.String()
}

func sampleRecords() map[string]idemstore.Record {
	at := time.Date(2100, 1, 2, 3, 4, 5, 678901000, time.UTC)
	completed := func(resp idemstore.Response) idemstore.Record {
		return idemstore.Record{Owner: "owner", Fingerprint: strings.Repeat("ab", 32), Status: idemstore.StatusCompleted,
			CreatedAt: at, ExpiresAt: at.Add(24 * time.Hour), Response: &resp}
	}
	return map[string]idemstore.Record{
		"in progress": {Owner: "owner", Fingerprint: strings.Repeat("ab", 32), Status: idemstore.StatusInProgress,
			CreatedAt: at, LeaseUntil: at.Add(12 * time.Second), ExpiresAt: at.Add(24 * time.Hour)},
		"in progress, odd owner and hash": {Owner: allBytes() + strings.Repeat("o", 300), Fingerprint: "\x00\xff",
			Status: idemstore.StatusInProgress, CreatedAt: at, LeaseUntil: at, ExpiresAt: at},
		"in progress, empty owner and hash": {Status: idemstore.StatusInProgress, CreatedAt: at, LeaseUntil: at, ExpiresAt: at},
		"times before 1970": {Owner: "o", Fingerprint: "h", Status: idemstore.StatusInProgress,
			CreatedAt: time.Date(1960, 1, 1, 0, 0, 0, 1000, time.UTC), LeaseUntil: time.UnixMicro(-1).UTC(), ExpiresAt: time.UnixMicro(0).UTC()},
		"every byte value in the body": completed(idemstore.Response{StatusCode: 200, Body: allBytes() + allBytes()}),
		"empty body":                   completed(idemstore.Response{StatusCode: 204}),
		"large body":                   completed(idemstore.Response{StatusCode: 200, Body: strings.Repeat(allBytes(), 8<<10)}),
		"base64 body":                  completed(idemstore.Response{StatusCode: 200, Body: "AAEC", IsBase64Encoded: true}),
		"headers": completed(idemstore.Response{StatusCode: 201, Body: `{"id":"1"}`, Headers: map[string]string{
			"Content-Type": "application/json", "Location": "/tasks/1", "X-Raw": allBytes(), "": "", "X-Empty": "",
			allBytes(): "name of every byte",
		}}),
		"odd status codes": completed(idemstore.Response{StatusCode: -1, Body: "x"}),
		"largest code":     completed(idemstore.Response{StatusCode: math.MaxInt32}),
		"origin": completed(idemstore.Response{StatusCode: 201, Body: `{"id":"1"}`, Headers: map[string]string{"Content-Type": "application/json"},
			Origin: &idemstore.Origin{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: at.Add(time.Second)}}),
		"origin, empty body and every byte": completed(idemstore.Response{StatusCode: 204, IsBase64Encoded: true,
			Origin: &idemstore.Origin{TraceID: allBytes(), SpanID: "", At: time.UnixMicro(-1).UTC()}}),
		"origin of the not-kept marker": completed(idemstore.Response{StatusCode: 201, NotKept: true,
			Origin: &idemstore.Origin{TraceID: "t", SpanID: "s", At: time.Time{}.Add(time.Microsecond)}}),
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for name, rec := range sampleRecords() {
		t.Run(name, func(t *testing.T) {
			v, err := encodeRecord(rec)
			require.NoError(t, err)
			got, err := decodeRecord("user", "key", string(v))
			require.NoError(t, err)
			want := rec
			want.UserID, want.Key = "user", "key"
			if want.Status == idemstore.StatusCompleted {
				want.LeaseUntil = time.Time{}
				if len(want.Response.Headers) == 0 {
					want.Response.Headers = nil
				}
			}
			require.Equal(t, want, got)
			if rec.Response != nil {
				require.Equal(t, []byte(rec.Response.Body), []byte(got.Response.Body), "the body, byte for byte")
			}
		})
	}
}

// TestRecordTruncated: a value cut before the end of its length-prefixed
// fields (and the origin) is not a record; cut in the body, it is one with
// a shorter body (the body is last and has no length), which is why nothing
// but the store writes under the prefix.
func TestRecordTruncated(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"headers", "origin"} {
		rec := sampleRecords()[name]
		v, err := encodeRecord(rec)
		require.NoError(t, err)
		bodyAt := len(v) - len(rec.Response.Body)
		for n := range bodyAt {
			_, err := decodeRecord("", "", string(v[:n]))
			require.ErrorIs(t, err, errNotRecord, "%s: cut at %d of %d", name, n, len(v))
		}
		got, err := decodeRecord("", "", string(v[:bodyAt]))
		require.NoError(t, err)
		require.Empty(t, got.Response.Body)
		require.Equal(t, rec.Response.Origin, got.Response.Origin)
	}
}

// TestRecordOriginVersion: a record without an origin is version 1, as
// before the origin; one with an origin is version 2, which a reader of
// version 1 alone refuses, and is version 1 with the origin before the
// body.
func TestRecordOriginVersion(t *testing.T) {
	t.Parallel()
	plain := sampleRecords()["origin"] // one header: a fixed order
	plainResp := *plain.Response
	plainResp.Origin = nil
	plain.Response = &plainResp
	v1, err := encodeRecord(plain)
	require.NoError(t, err)
	require.Equal(t, byte(1), v1[offVersion])

	traced := plain
	resp := *plain.Response
	resp.Origin = &idemstore.Origin{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: time.UnixMicro(1893553445678901)}
	traced.Response = &resp
	v2, err := encodeRecord(traced)
	require.NoError(t, err)
	require.Equal(t, byte(2), v2[offVersion])
	origin := "\x00\x20" + resp.Origin.TraceID + "\x00\x10" + resp.Origin.SpanID + "\x00\x06\xba\x2d\x44\x7e\x2f\x35"
	bodyAt := len(v1) - len(resp.Body)
	require.Equal(t, string(v1[1:bodyAt])+origin+resp.Body, string(v2[1:]))

	got, err := decodeRecord("", "", string(v2))
	require.NoError(t, err)
	require.Equal(t, resp.Origin.At.UTC(), got.Response.Origin.At)

	inProgress, err := encodeRecord(sampleRecords()["in progress"])
	require.NoError(t, err)
	inProgress[offVersion] = recordVersionOrigin
	_, err = decodeRecord("", "", string(inProgress))
	require.ErrorIs(t, err, errNotRecord, "no record in progress has an origin")
}

func TestRecordRejects(t *testing.T) {
	t.Parallel()
	rec := sampleRecords()["in progress"]
	v, err := encodeRecord(rec)
	require.NoError(t, err)
	_, err = decodeRecord("", "", "\x03"+string(v[1:]))
	require.ErrorIs(t, err, errLaterRecord, "a later version is a later release's record, not foreign data")
	for name, value := range map[string]string{
		"version 0":      "\x00" + string(v[1:]),
		"unknown status": string(v[:1]) + "x" + string(v[2:]),
		"plain text":     "not a record at all, but long enough to hold the fixed fields",
		"empty":          "",
	} {
		_, err := decodeRecord("", "", value)
		require.ErrorIs(t, err, errNotRecord, name)
	}

	for name, bad := range map[string]idemstore.Record{
		"owner too long":    {Owner: strings.Repeat("o", math.MaxUint16+1), Status: idemstore.StatusInProgress},
		"hash too long":     {Fingerprint: strings.Repeat("h", math.MaxUint16+1), Status: idemstore.StatusInProgress},
		"no status":         {},
		"no response":       {Status: idemstore.StatusCompleted},
		"code out of range": {Status: idemstore.StatusCompleted, Response: &idemstore.Response{StatusCode: math.MaxInt32 + 1}},
	} {
		_, err := encodeRecord(bad)
		require.Error(t, err, name)
	}
}

// TestDecodeAllocations: decoding shares the value's memory; what it
// allocates is the response and the header map.
func TestDecodeAllocations(t *testing.T) {
	rec := sampleRecords()["headers"]
	v, err := encodeRecord(rec)
	require.NoError(t, err)
	s := string(v)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeRecord("u", "k", s); err != nil {
			panic(err)
		}
	})
	require.LessOrEqual(t, allocs, 4.0)
}

func FuzzDecodeRecord(f *testing.F) {
	for _, rec := range sampleRecords() {
		if v, err := encodeRecord(rec); err == nil && len(v) < 4096 {
			f.Add(v)
		}
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		rec, err := decodeRecord("", "", string(v))
		if err != nil {
			return
		}
		// What decodes encodes again to a value that decodes the same.
		again, err := encodeRecord(rec)
		require.NoError(t, err)
		rec2, err := decodeRecord("", "", string(again))
		require.NoError(t, err)
		if rec.Response != nil && len(rec.Response.Headers) == 0 {
			rec.Response.Headers = nil
		}
		if rec.Status == idemstore.StatusCompleted {
			rec.LeaseUntil = time.Time{}
		}
		require.Equal(t, rec, rec2)
	})
}
