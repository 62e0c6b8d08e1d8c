package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// probeUser is the user of CheckStore's probe record. It is a UUID no
// authorizer hands out (version 8, derived like a function's scope), so the
// probe never meets a client's record.
var probeUser = derivedUUID("store-check")

// probeLife is how long a probe record lives should CheckStore be cut off
// before it releases it.
const probeLife = time.Minute

// CheckStore checks, before the first request, that s can make every call the
// engine makes. It works on a probe record of a user no client has. The
// record is claimed, completed under another owner token (which must write
// nothing), and released. Then CheckStore runs s's own Check when s is an
// idemstore.Checker. Nothing is left behind. Call it at cold start, so that a
// missing grant or migration shows in the first log line rather than in the
// first client's 500. It returns nil or the store's *idemstore.Error
// (idemstore.IsPermanent: fix the deployment; else the store is unreachable).
func CheckStore(ctx context.Context, s idemstore.Store) error {
	if s == nil {
		return errors.New("idempotency: CheckStore needs a Store, got nil")
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	key := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	now := time.Now()
	ref := idemstore.Ref{UserID: probeUser, Key: key, Owner: "store-check-" + h}
	res, err := s.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "store-check", Now: now, LeaseUntil: now.Add(probeLife), ExpiresAt: now.Add(probeLife)})
	if err != nil {
		return storeFailure("claim", err)
	}
	if !res.Claimed {
		return &idemstore.Error{Op: "check", Err: errors.New("the claim of a fresh probe key was not granted")}
	}
	other := ref
	other.Owner += "-other"
	switch err := s.Complete(ctx, idemstore.Completion{Ref: other, Response: idemstore.Response{StatusCode: 200}, Now: now, ExpiresAt: now.Add(probeLife)}); {
	case errors.Is(err, idemstore.ErrLeaseLost):
	case err == nil:
		return &idemstore.Error{Op: "check", Err: errors.New("a completion by an owner that does not hold the probe record was written")}
	default:
		_ = s.Release(context.WithoutCancel(ctx), ref)
		return storeFailure("complete", err)
	}
	if err := s.Release(ctx, ref); err != nil {
		return storeFailure("release", fmt.Errorf("releasing the probe record: %w", err))
	}
	if c, ok := s.(idemstore.Checker); ok {
		return c.Check(ctx)
	}
	return nil
}
