package history

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The operations of the sequential model, one key each. A call that ran its
// handler is two operations: its claim (from the call to the handler's
// start) and its finish (from the handler's return to the call's return).
// A call that did not run is one request operation. A renewal of a
// heartbeat run's lease that was sent to the store is one renew operation.
const (
	opClaim   = "claim"
	opFinish  = "finish"
	opRequest = "request"
	opRenew   = "renew"
)

// opInput is the input of one operation.
type opInput struct {
	Op    string
	Key   string
	Owner string
	Body  string
	// Lease is when the lease of the call's claim runs out (Unix
	// nanoseconds): its deadline + the margin, or, for a call with no
	// deadline, a lower bound of its engine's clock at the claim + the
	// heartbeat; a renewal's is the lease it asks for.
	Lease int64
	// Returned is when the operation returned (Unix nanoseconds; MaxInt64
	// when it never did): a claim that took over a lease did so by then.
	Returned int64
	// Complete is a finish's kind: true when the handler succeeded (the
	// engine completes), false when it failed (the engine releases); Known
	// is false when the process died during the handler.
	Complete, Known bool
}

// Outputs: a claim's is "claimed"; a finish's is the engine's outcome
// (completed, released, lease_lost, store_error) or "unknown" (the process
// was killed); a request's is "replay:<owner>", "busy", "mismatch",
// "unavailable" or "unknown"; a renewal's is what the store did, seen
// before any fault was injected on its reply (renewed, lease_lost) or
// "unknown" (the store's call failed).
const (
	outClaimed     = "claimed"
	outUnknown     = "unknown"
	outBusy        = "busy"
	outMismatch    = "mismatch"
	outUnavailable = "unavailable"
	replayPrefix   = "replay:"
)

// record is the model's state of one key.
type record struct {
	Status byte // 0 absent, 1 in progress, 2 completed
	Owner  string
	Body   string
	Lease  int64 // in progress: when the owner's lease runs out
}

const (
	absent byte = iota
	inProgress
	completed
)

// contractModel returns the sequential model of the Store contract as the
// engine uses it, for histories whose clocks are within skew of each
// other. A claim takes a record that is absent, or in progress with a
// lease that has run out by the time the claim returned (judged with the
// skew in the owner's favour: the lease rule); complete, release and renew
// change only the caller's own record in progress, a renewal moving its
// lease; a replay returns the completed record's result and nothing else.
func contractModel(skew int64) porcupine.Model {
	takeable := func(r record, ret int64) bool {
		return r.Status == absent || r.Status == inProgress && ret >= r.Lease-skew
	}
	step := func(state, input, output any) []any {
		r := state.(record)
		in := input.(opInput)
		out := output.(string)
		same := []any{r}
		mine := r.Status == inProgress && r.Owner == in.Owner
		claimedBy := record{Status: inProgress, Owner: in.Owner, Body: in.Body, Lease: in.Lease}
		done := record{Status: completed, Owner: r.Owner, Body: r.Body}
		switch in.Op {
		case opClaim:
			if out == outClaimed && takeable(r, in.Returned) {
				return []any{claimedBy}
			}
			return nil
		case opFinish:
			if !mine {
				// P4: nothing of another's record is changed; the engine
				// sees that as a lost lease (or fails, or dies).
				switch out {
				case "lease_lost", "store_error", outUnknown:
					return same
				}
				return nil
			}
			if !in.Known {
				return []any{r, done, record{}}
			}
			if in.Complete {
				switch out {
				case "completed", "lease_lost": // lease_lost: a retry after a lost reply that had committed
					return []any{done}
				case "store_error", outUnknown:
					return []any{r, done}
				}
				return nil
			}
			switch out {
			case "released", "lease_lost":
				return []any{record{}}
			case "store_error", outUnknown:
				return []any{r, record{}}
			}
			return nil
		case opRenew:
			renewed := r
			renewed.Lease = in.Lease
			switch {
			case out == "renewed" && mine:
				return []any{renewed}
			case out == "lease_lost" && !mine:
				return same
			case out == outUnknown && mine:
				return []any{r, renewed}
			case out == outUnknown:
				return same
			}
			return nil
		case opRequest:
			switch {
			case strings.HasPrefix(out, replayPrefix):
				if r.Status == completed && r.Owner == strings.TrimPrefix(out, replayPrefix) && r.Body == in.Body {
					return same
				}
				return nil
			case out == outBusy:
				if r.Status == inProgress && r.Body == in.Body {
					return same
				}
				return nil
			case out == outMismatch:
				if r.Status != absent && r.Body != in.Body {
					return same
				}
				return nil
			case out == outUnavailable || out == outUnknown:
				// The claim may have committed and its release failed: the
				// record is then this caller's until its lease runs out.
				if takeable(r, in.Returned) {
					return []any{r, claimedBy}
				}
				return same
			}
			return nil
		}
		return nil
	}
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{record{}} },
		Step: step,
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			for _, op := range history {
				k := op.Input.(opInput).Key
				byKey[k] = append(byKey[k], op)
			}
			keys := make([]string, 0, len(byKey))
			for k := range byKey {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(record) == b.(record) },
		DescribeOperation: func(input, output any) string {
			in := input.(opInput)
			return fmt.Sprintf("%s(%s, body %s) → %v", in.Op, short(in.Owner), short(in.Body), output)
		},
		DescribeState: func(state any) string {
			r := state.(record)
			return fmt.Sprintf("%d %s %s", r.Status, short(r.Owner), short(r.Body))
		},
	}
	return m.ToModel()
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
