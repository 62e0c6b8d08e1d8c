package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/stretchr/testify/require"
)

// TestPendingRunsBound: the table of runs in progress holds at most
// maxPending. A full table first drops the records past their expiry; one
// full of live records remembers no more (those runs complete through the
// script).
func TestPendingRunsBound(t *testing.T) {
	t.Parallel()
	var p pendingRuns
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	for i := range maxPending {
		p.put("k"+strconv.Itoa(i), "o", []byte{byte(i)}, past)
	}
	require.Len(t, p.m, maxPending)
	p.put("live", "o", []byte("v"), future)
	require.Len(t, p.m, 1, "the expired records were dropped")
	v, ok := p.take("live", "o")
	require.True(t, ok)
	require.Equal(t, "v", string(v))
	_, ok = p.take("live", "o")
	require.False(t, ok, "take forgets")

	for i := range maxPending {
		p.put("k"+strconv.Itoa(i), "o", []byte{byte(i)}, future)
	}
	p.put("one more", "o", []byte("v"), future)
	_, ok = p.take("one more", "o")
	require.False(t, ok, "a table full of live records remembers no more")
	_, ok = p.take("k0", "other owner")
	require.False(t, ok, "a record is remembered for its owner alone")
}

// TestPendingRunsRenewed: a renewal changes a copy of the remembered record
// (a completion may be sending the old one), moves its lease, and moves its
// expiry only when the lease reaches past it.
func TestPendingRunsRenewed(t *testing.T) {
	t.Parallel()
	now := time.UnixMicro(1_700_000_000_000_000)
	value, err := encodeRecord(recordInProgress(now, now.Add(time.Minute), now.Add(time.Hour)))
	require.NoError(t, err)
	var p pendingRuns
	p.put("k", "o", value, now.Add(time.Hour))
	p.renewed("k", "o", now.Add(2*time.Minute).UnixMicro())
	got, ok := p.take("k", "o")
	require.True(t, ok)
	want, err := encodeRecord(recordInProgress(now, now.Add(2*time.Minute), now.Add(time.Hour)))
	require.NoError(t, err)
	require.Equal(t, want, got)
	orig, err := encodeRecord(recordInProgress(now, now.Add(time.Minute), now.Add(time.Hour)))
	require.NoError(t, err)
	require.Equal(t, orig, value, "the remembered bytes were not changed in place")

	p.put("k", "o", got, now.Add(time.Hour))
	p.renewed("k", "o", now.Add(2*time.Hour).UnixMicro())
	got, _ = p.take("k", "o")
	want, err = encodeRecord(recordInProgress(now, now.Add(2*time.Hour), now.Add(2*time.Hour)))
	require.NoError(t, err)
	require.Equal(t, want, got, "a lease past the expiry moves the expiry")
	p.renewed("missing", "o", now.UnixMicro())
	require.Empty(t, p.m)
}

func recordInProgress(created, lease, expires time.Time) idemstore.Record {
	return idemstore.Record{Owner: "o", Fingerprint: "h", Status: idemstore.StatusInProgress, CreatedAt: created, LeaseUntil: lease, ExpiresAt: expires}
}
