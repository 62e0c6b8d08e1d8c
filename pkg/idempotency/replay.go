package idempotency

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Replay is what Config.OnReplay and FunctionConfig.OnReplay get on a replay.
// It holds the stored response, the record's metadata, and the headers about to
// be sent, which the hook may change. It is Powertools' response hook.
type Replay struct {
	// Key is the idempotency key as the request carried it (normalised: a
	// UUID in lower case), or a Function's key.
	Key string
	// UserID is the user id the record is kept under (SubjectUUID of the
	// subject), or a Function's scope id.
	UserID string
	// Response is the stored response, as it was kept. Changing it changes
	// nothing; change Header instead.
	Response idemstore.Response
	// Header holds the headers the replay will be sent with (the stored
	// ones and Idempotent-Replayed: true), which the hook may change. A
	// Function's replay has none.
	Header http.Header
	// CreatedAt is when the record was claimed, ExpiresAt when it expires;
	// zero when the store cannot say (CreatedAt: from the local cache too).
	CreatedAt, ExpiresAt time.Time
}

// replayMetadata fills the times of a replayed record when the store's
// claim answered without them (pgstore's replay is the stored envelope
// alone): one more read, made only when a replay hook wants them.
func (e *engine) replayMetadata(ctx context.Context, obs *observation, rec idemstore.Record) idemstore.Record {
	if !rec.ExpiresAt.IsZero() {
		return rec // from the store's claim, or the local cache (no CreatedAt)
	}
	admin, ok := e.store.(idemstore.Admin)
	if !ok {
		return rec
	}
	var full idemstore.Record
	var found bool
	err := obs.timed("get", func() (err error) {
		full, found, err = admin.Get(ctx, rec.UserID, rec.Key)
		return err
	})
	switch {
	case err != nil:
		obs.err = errors.Join(obs.err, fmt.Errorf("reading the replayed record's times: %w", err))
	case found:
		rec.CreatedAt, rec.ExpiresAt = full.CreatedAt, full.ExpiresAt
	}
	return rec
}

// hookCopy is the stored response as a replay hook sees it: its headers are
// a map of the hook's own, since the record's may be the local cache's
// entry, shared by every later replay and by concurrent ones.
func hookCopy(r idemstore.Response) idemstore.Response {
	r.Headers = maps.Clone(r.Headers)
	return r
}

// onReplay calls Config.OnReplay with the replayed record and the headers
// about to be sent, which it may change.
func (d *decorator) onReplay(ctx context.Context, obs *observation, key string, rec idemstore.Record, header http.Header) {
	rec = d.e.replayMetadata(ctx, obs, rec)
	d.cfg.OnReplay(ctx, &Replay{
		Key:       key,
		UserID:    rec.UserID,
		Response:  hookCopy(*rec.Response),
		Header:    header,
		CreatedAt: rec.CreatedAt,
		ExpiresAt: rec.ExpiresAt,
	})
}

// onReplay calls FunctionConfig.OnReplay with the record a repeat is
// answered from.
func (f *function[In, Out]) onReplay(ctx context.Context, obs *observation, key string, ref idemstore.Ref, rec idemstore.Record) {
	rec.UserID, rec.Key = ref.UserID, ref.Key
	rec = f.e.replayMetadata(ctx, obs, rec)
	f.cfg.OnReplay(ctx, &Replay{
		Key:       key,
		UserID:    rec.UserID,
		Response:  hookCopy(*rec.Response),
		Header:    http.Header{},
		CreatedAt: rec.CreatedAt,
		ExpiresAt: rec.ExpiresAt,
	})
}
