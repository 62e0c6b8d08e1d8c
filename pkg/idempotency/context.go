package idempotency

import (
	"context"
	"time"
)

// Info describes the protected request a handler is running for.
type Info struct {
	// Key is the request's idempotency key, normalised (a UUID in lower
	// case); the store keeps RecordKey of it.
	Key string
	// UserID is the authenticated user, a lower-case UUID (SubjectUUID of
	// the subject).
	UserID string
	// Tenant is the run's tenant (Settings.Tenant), "" without one; the
	// record is kept under TenantUserID(Tenant, UserID).
	Tenant string
	// Fingerprint is the request's fingerprint. A handler that records the key
	// on its row uses it to tell a retry from another request with that key.
	Fingerprint string
}

type infoKey struct{}

// FromContext returns the Info of the protected request that ctx belongs to.
// It reports false outside a handler run by Wrap (for instance for a GET,
// which passes through).
func FromContext(ctx context.Context) (Info, bool) {
	info, ok := ctx.Value(infoKey{}).(Info)
	return info, ok
}

// NewContext returns a copy of ctx carrying info, as Wrap gives it to the
// handler. It lets tests call a handler directly as if Wrap had run it.
func NewContext(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// leaseUntil returns when a claim made at now stops protecting its record:
// the invocation's deadline plus margin, never later than now + maxLease.
// With no deadline the lease is now + maxLease; a deadline at or before now
// gives a lease that has already run out (now), never an unbounded one.
//
// The deadline is on the process's own clock (Lambda sets it from
// time.Now), which wall is when that clock read; the time left until it is
// added to now, which is on Config.Clock, so that an injected clock and
// the deadline agree.
func leaseUntil(ctx context.Context, now, wall time.Time, margin, maxLease time.Duration) time.Time {
	limit := now.Add(maxLease)
	deadline, ok := ctx.Deadline()
	if !ok {
		return limit
	}
	left := deadline.Sub(wall)
	if left <= 0 {
		return now
	}
	if lease := now.Add(left + margin); lease.Before(limit) {
		return lease
	}
	return limit
}
