package pgstore_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// envelopeCases are responses whose envelopes exercise every branch of the
// hand-written encoder and parser.
func envelopeCases() []idemstore.Response {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	return []idemstore.Response{
		{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json", "Location": "/tasks/3f0c"}, Body: `{"id":"3f0c","title":"Write the report"}`},
		{StatusCode: 204},
		{StatusCode: 200, Body: "line one\nline two\r\n\ttabbed \"quoted\" back\\slash / solidus \b \f \x01 \x1f \x7f"},
		{StatusCode: 200, Body: "ünïcödé — 日本語 😀 \u2028\u2029", Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8", "X-Note": "é\"\\\n"}},
		{StatusCode: 200, Body: string(every)},                                         // invalid UTF-8 and NUL: base64
		{StatusCode: 200, Body: "a\x00b", Headers: map[string]string{"X-Bin": "\xff"}}, // both base64
		{StatusCode: 200, Body: "aGVsbG8=", IsBase64Encoded: true, Headers: map[string]string{}},
		{StatusCode: 422, Body: strings.Repeat(`{"k":"v\n"}`, 2000)},
		{StatusCode: 201, Body: `{"id":"3f0c"}`, Headers: map[string]string{"Content-Type": "application/json"}, Origin: &idemstore.Origin{
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)}},
		{StatusCode: 200, Body: "a\x00b", NotKept: true, Origin: &idemstore.Origin{TraceID: "t\"\\", SpanID: "é", At: time.UnixMicro(-1).UTC()}},
		{StatusCode: 200, Origin: &idemstore.Origin{At: time.UnixMicro(time.Time{}.UnixMicro()).UTC()}},
	}
}

// The envelope goes into JSONB and comes back as PostgreSQL writes it; the
// hand-written parser must take that text and give what encoding/json gives.
func TestEnvelopeThroughJSONB(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	ctx := context.Background()
	for i, want := range envelopeCases() {
		text, err := pgstore.EncodeEnvelope(want)
		require.NoError(t, err)
		require.True(t, json.Valid([]byte(text)), "case %d: %s", i, text)

		var stored string
		require.NoError(t, db.QueryRow(ctx, `SELECT $1::jsonb::text`, text).Scan(&stored))
		env, ok := pgstore.ParseEnvelope(stored)
		require.True(t, ok, "case %d: the parser refused PostgreSQL's text %.200s", i, stored)
		var reference pgstore.Envelope
		require.NoError(t, json.Unmarshal([]byte(stored), &reference))
		if reference.Headers == nil && env.Headers != nil && len(env.Headers) == 0 {
			reference.Headers = map[string]string{}
		}
		require.Equal(t, reference, env, "case %d", i)

		got, err := pgstore.DecodeEnvelope(stored)
		require.NoError(t, err)
		if len(want.Headers) == 0 {
			want.Headers, got.Headers = nil, nil
		}
		require.Equal(t, want, *got, "case %d", i)
	}
}

// Texts the parser does not take are left to encoding/json, which decides.
func TestEnvelopeParserFallsBack(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		`{"status": 201, "body": "x", "extra": 1}`,      // unknown member: ignored by encoding/json
		`{"status": 2.01e2, "body": "x"}`,               // not an integer as written
		`{"status": 201, "body": "\ud83d"}`,             // lone surrogate: U+FFFD
		`{"status": 201, "body": "x"} trailing`,         // not one value
		`{"status": 201, "body": "\x"}`,                 // bad escape
		"{\"status\": 201, \"body\": \"\xff\"}",         // invalid UTF-8
		`{"status": 201, "headers": {"a": 1}}`,          // header value not a string
		`{"status": 201, "isBase64Encoded": "yes"}`,     // not a boolean
		`{"status": 201 "body": "x"}`,                   // missing comma
		`{"status": 201, "body": "unterminated`,         // cut short
		`{"status": 201, "body": "\u00e9\ud83d\ude00"}`, // handled by the parser itself

		// The origin member.
		`{"status": 201, "body": "x", "origin": {"trace": "t", "span": "s", "at": 1}}`,                    // handled by the parser itself
		`{"status": 201, "body": "x", "origin": {"at": 1, "trace": "t", "span": "s", "next": true}}`,      // unknown member of the origin
		`{"status": 201, "body": "x", "origin": {"at": 1.5, "trace": "t", "span": "s"}}`,                  // not Unix microseconds
		`{"status": 201, "body": "x", "origin": {"at": 1, "at": 2, "trace": "t", "span": "s"}}`,           // a repeated member
		`{"status": 201, "body": "x", "origin": null}`,                                                    // no origin
		`{"status": 201, "body": "x", "origin": {"trace": "t", "span": "s", "at": 1} , "notKept": false}`, // white space around
	} {
		env, ok := pgstore.ParseEnvelope(text)
		var reference pgstore.Envelope
		refErr := json.Unmarshal([]byte(text), &reference)
		if ok {
			require.NoError(t, refErr, "%s", text)
			require.Equal(t, reference, env, "%s", text)
		}
		got, err := pgstore.DecodeEnvelope(text)
		if refErr != nil {
			require.Error(t, err, "%s", text)
			continue
		}
		if reference.BodyEncoding == "" && reference.HeadersEncoding == "" {
			require.NoError(t, err, "%s", text)
			require.Equal(t, reference.Body, got.Body, "%s", text)
			require.Equal(t, reference.Status, got.StatusCode, "%s", text)
		}
	}
}

// TestEnvelopeOrigin: the origin is a member of its own, absent when the
// response has none (an envelope without it is what a record written before
// the origin holds); a reader that does not know the member, as
// encoding/json is the reference of every release's reader, replays the
// response without it.
func TestEnvelopeOrigin(t *testing.T) {
	t.Parallel()
	resp := idemstore.Response{StatusCode: 201, Body: "x"}
	text, err := pgstore.EncodeEnvelope(resp)
	require.NoError(t, err)
	require.Equal(t, `{"status":201,"body":"x"}`, text, "no origin, no member")
	got, err := pgstore.DecodeEnvelope(text)
	require.NoError(t, err)
	require.Nil(t, got.Origin)

	resp.Origin = &idemstore.Origin{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		At: time.Date(2030, 1, 2, 4, 4, 5, 678901234, time.FixedZone("CET", 3600))}
	text, err = pgstore.EncodeEnvelope(resp)
	require.NoError(t, err)
	require.Equal(t, `{"status":201,"body":"x","origin":{"trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","at":1893553445678901}}`, text)
	got, err = pgstore.DecodeEnvelope(text)
	require.NoError(t, err)
	require.Equal(t, &idemstore.Origin{TraceID: resp.Origin.TraceID, SpanID: resp.Origin.SpanID, At: time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)}, got.Origin)

	var before struct { // the envelope as a release before the origin reads it
		Status  int    `json:"status"`
		Body    string `json:"body"`
		NotKept bool   `json:"notKept,omitempty"`
	}
	require.NoError(t, json.Unmarshal([]byte(text), &before))
	require.Equal(t, 201, before.Status)
	require.Equal(t, "x", before.Body)

	_, err = pgstore.EncodeEnvelope(idemstore.Response{StatusCode: 200, Origin: &idemstore.Origin{TraceID: "a\x00b"}})
	require.Error(t, err, "an id that JSONB cannot hold")
}

// FuzzEnvelopeParser: whatever the parser accepts, it reads as encoding/json
// does.
func FuzzEnvelopeParser(f *testing.F) {
	for _, r := range envelopeCases() {
		text, err := pgstore.EncodeEnvelope(r)
		require.NoError(f, err)
		f.Add(text)
	}
	f.Add(`{"body": "a\"b", "status": 200, "headers": {"X": "\u00e9"}}`)
	f.Fuzz(func(t *testing.T, text string) {
		env, ok := pgstore.ParseEnvelope(text)
		if !ok {
			return
		}
		var reference pgstore.Envelope
		require.NoError(t, json.Unmarshal([]byte(text), &reference), "%q", text)
		if reference.Headers == nil && env.Headers != nil && len(env.Headers) == 0 {
			reference.Headers = map[string]string{}
		}
		require.Equal(t, reference, env, "%q", text)
	})
}

func BenchmarkDecodeEnvelope(b *testing.B) {
	text := `{"body": "{\"id\":\"3f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01\",\"title\":\"Write the deploy guide\",\"status\":\"todo\",\"due_date\":\"2026-12-31\"}", "status": 201, "headers": {"Location": "/tasks/3f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01", "Content-Type": "application/json"}}`
	b.ReportAllocs()
	for range b.N {
		if _, err := pgstore.DecodeEnvelope(text); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeEnvelope(b *testing.B) {
	r := idemstore.Response{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json", "Location": "/tasks/3f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"},
		Body: `{"id":"3f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01","title":"Write the deploy guide","status":"todo","due_date":"2026-12-31"}`}
	b.ReportAllocs()
	for range b.N {
		if _, err := pgstore.EncodeEnvelope(r); err != nil {
			b.Fatal(err)
		}
	}
}
