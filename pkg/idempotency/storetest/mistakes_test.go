package storetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// A store author's mistakes, each a memstore that makes one: the suite
// must fail every one of them with a case that names the rule.

// mistakeEnv names the mistake the worker test runs the suite on.
const mistakeEnv = "STORETEST_MISTAKE"

// mistaken is a memstore that makes one mistake.
type mistaken struct {
	*memstore.Store
	kind string
}

func (m *mistaken) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	switch m.kind {
	case "own-clock":
		// Takeover and expiry decided on the real time alone.
		rec, found, _ := m.Store.Get(ctx, c.UserID, c.Key)
		if !found || (rec.Status == idemstore.StatusInProgress && rec.LeaseUntil.Before(time.Now())) {
			_, _ = m.Store.Delete(ctx, c.UserID, c.Key)
		}
	case "millisecond-times":
		c.Now, c.LeaseUntil, c.ExpiresAt = c.Now.Truncate(time.Millisecond), c.LeaseUntil.Truncate(time.Millisecond), c.ExpiresAt.Truncate(time.Millisecond)
	}
	c.Ref = m.ids(c.Ref)
	res, err := m.Store.Claim(ctx, c)
	return res, m.notID(err)
}

func (m *mistaken) Complete(ctx context.Context, c idemstore.Completion) error {
	if m.kind == "complete-refuses-late" {
		if rec, found, err := m.Store.Get(ctx, c.UserID, c.Key); err == nil && found && rec.Status == idemstore.StatusInProgress && c.Now.After(rec.LeaseUntil) {
			return idemstore.ErrLeaseLost
		}
	}
	c.Ref = m.ids(c.Ref)
	return m.notID(m.Store.Complete(ctx, c))
}

func (m *mistaken) Release(ctx context.Context, r idemstore.Ref) error {
	return m.notID(m.Store.Release(ctx, m.ids(r)))
}

func (m *mistaken) Renew(ctx context.Context, r idemstore.Renewal) error {
	r.Ref = m.ids(r.Ref)
	return m.notID(m.Store.Renew(ctx, r))
}

func (m *mistaken) Get(ctx context.Context, userID, key string) (idemstore.Record, bool, error) {
	ref := m.ids(idemstore.Ref{UserID: userID, Key: key})
	rec, found, err := m.Store.Get(ctx, ref.UserID, ref.Key)
	return rec, found, m.notID(err)
}

func (m *mistaken) Delete(ctx context.Context, userID, key string) (bool, error) {
	ref := m.ids(idemstore.Ref{UserID: userID, Key: key})
	ok, err := m.Store.Delete(ctx, ref.UserID, ref.Key)
	return ok, m.notID(err)
}

// ids maps any id to a UUID, for the store that checks none.
func (m *mistaken) ids(r idemstore.Ref) idemstore.Ref {
	if m.kind == "no-id-checks" {
		for _, id := range []*string{&r.UserID, &r.Key} {
			if !idemstore.IsID(*id) {
				*id = uuid.NewSHA1(uuid.NameSpaceOID, []byte(*id)).String()
			}
		}
	}
	return r
}

// notID marks ErrNotID transient, for the store that does so.
func (m *mistaken) notID(err error) error {
	if m.kind == "not-id-transient" && errors.Is(err, idemstore.ErrNotID) {
		return &idemstore.Error{Op: "claim", Err: err}
	}
	return err
}

// prefixed is the store of one prefix; its List leaks the records of every
// prefix that starts with its own, garbled as a store that reads another
// layout's bytes would.
type prefixed struct {
	*mistaken
	prefix string
	all    *sync.Map // prefix → *prefixed
}

func (p *prefixed) List(ctx context.Context, q idemstore.ListQuery) ([]idemstore.Record, error) {
	recs, err := p.mistaken.List(ctx, q)
	if err != nil || p.prefix == "" || q.UserID != "" {
		return recs, err
	}
	p.all.Range(func(k, v any) bool {
		if other := k.(string); other != p.prefix && strings.HasPrefix(other, p.prefix) {
			more, _ := v.(*prefixed).mistaken.List(ctx, q)
			for _, r := range more {
				r.UserID, r.Key = uuid.NewString(), uuid.NewString()
				recs = append(recs, r)
			}
		}
		return true
	})
	return recs, nil
}

// TestMistakeWorker runs the suite on the mistake mistakeEnv names; it is
// a process of TestStoreMistakesFail and does nothing on its own.
func TestMistakeWorker(t *testing.T) {
	kind := os.Getenv(mistakeEnv)
	if kind == "" {
		t.Skip("run by TestStoreMistakesFail")
	}
	var prefixes sync.Map
	cfg := storetest.Config{
		Parts: storetest.Contract | storetest.HTTP,
		New:   func(*testing.T) idemstore.Store { return &mistaken{Store: memstore.New(), kind: kind} },
	}
	if kind == "list-prefix-leak" {
		cfg.Parts = storetest.Contract
		cfg.NewWithPrefix = func(_ *testing.T, prefix string) idemstore.Store {
			p := &prefixed{mistaken: &mistaken{Store: memstore.New(), kind: kind}, prefix: prefix, all: &prefixes}
			v, _ := prefixes.LoadOrStore(prefix, p)
			return v.(*prefixed)
		}
	}
	storetest.Run(t, cfg)
}

// TestStoreMistakesFail runs the suite on each mistaken store, in a
// process of its own, and requires it to fail with a case that names the
// rule, and not to panic.
func TestStoreMistakesFail(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite once per mistake")
	}
	t.Parallel()
	for kind, rule := range map[string]string{
		"own-clock":             "ExpiryOnTheCallersClock",
		"complete-refuses-late": "CompleteAfterLeaseRanOutBeforeTakeover",
		"list-prefix-leak":      "PrefixesAreExactBoundaries",
		"no-id-checks":          "IDsAreCheckedAndNotIDIsPermanent",
		"not-id-transient":      "IDsAreCheckedAndNotIDIsPermanent",
		"millisecond-times":     "TimesKeptToTheMicrosecond",
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMistakeWorker$", "-test.count=1")
			cmd.Env = append(os.Environ(), mistakeEnv+"="+kind)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the suite passed a store that makes the mistake %q", kind)
			require.NotContains(t, string(out), "panic:", "the suite panicked instead of failing a case")
			require.Contains(t, string(out), "--- FAIL: TestMistakeWorker/Contract/"+rule, "the case that names the rule fails")
			if kind == "own-clock" {
				require.Contains(t, string(out), "own clock", "the failure mentions clocks")
			}
		})
	}
}
