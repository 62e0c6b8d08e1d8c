package idempotency

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Pauses between the polls of a duplicate that waits for the first request's
// answer (Config.WaitForResult). They start at the first pause and grow by half
// up to the longest. Each gets up to a fifth added at random, so that
// duplicates arriving together do not poll together.
const (
	firstWaitPause   = 20 * time.Millisecond
	longestWaitPause = 500 * time.Millisecond
)

// waitMargin is kept free before the invocation's deadline: a wait never
// sleeps into it, so the duplicate still has time to answer. The margin
// grows to twice the slowest claim of the wait so far, so that on a slow
// store a last poll still answers before the deadline.
const waitMargin = 100 * time.Millisecond

// waitForResult is the claim of a duplicate that found its key in progress
// for the same request, when waiting is on: it polls the store with the
// same claim, as a retry would, until the record is no longer in progress
// (a replay; or a claim of its own when the first run released the key or
// its lease ran out, and this request runs instead), or the wait is over:
// maxWait after the first poll, the invocation's deadline less the margin,
// or ctx done. It then returns the last answer, still in progress, and the
// caller refuses as without waiting. Each poll is one Claim; a poll that
// fails is recovered from like the first claim (recoverClaim), and ends the
// wait.
func (e *engine) waitForResult(ctx context.Context, obs *observation, c idemstore.Claim, first idemstore.ClaimResult) (idemstore.ClaimResult, error) {
	res := first
	began := time.Now()
	defer func() { obs.waitedMS = msSince(began) }()
	until := began.Add(e.wait)
	deadline, hasDeadline := ctx.Deadline()
	margin := max(waitMargin, 2*obs.storeTime("claim"))
	pause := firstWaitPause
	for waiting(res, c.Fingerprint) {
		sleep := pause + rand.N(pause/5+1)
		left := time.Until(until)
		if hasDeadline {
			left = min(left, time.Until(deadline)-margin)
		}
		if left < sleep {
			return res, nil
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return res, nil
		case <-timer.C:
		}
		pause = min(pause*3/2, longestWaitPause)

		start := time.Now()
		obs.leaseFrom = start
		now := e.clock()
		c.Now, c.ExpiresAt = now, now.Add(e.ttl)
		c.LeaseUntil = e.lease(ctx, now, obs.heartbeat)
		err := obs.timed("wait", func() (err error) {
			res, err = e.store.Claim(ctx, c)
			return err
		})
		margin = max(margin, 2*time.Since(start))
		obs.waited = true
		if err != nil {
			return e.recoverClaim(ctx, c, err, obs)
		}
	}
	return res, nil
}

// waiting reports whether res is a record in progress for the same request,
// which a waiting duplicate polls again.
func waiting(res idemstore.ClaimResult, requestHash string) bool {
	return !res.Claimed && res.Record.Status == idemstore.StatusInProgress && res.Record.Fingerprint == requestHash
}
