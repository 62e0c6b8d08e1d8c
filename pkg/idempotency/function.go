package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/canonjson"
	"github.com/ichido/ichido/pkg/idempotency/internal/rpcmethod"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// FunctionConfig configures Function and SQSHandler. Store, Name and (for
// Function) Key are required; the zero value of every other field takes the
// documented default.
type FunctionConfig[In any] struct {
	// Store keeps the records. Required.
	Store idemstore.Store

	// Name names the work, e.g. "record-task-activity". It scopes the keys:
	// two functions given the same key never share a record. Keep it stable
	// across deployments: a new name forgets every key. Required.
	Name string

	// Key returns the idempotency key of an input: what makes two inputs
	// "the same work", such as an event id or a message id. It must not
	// depend on anything that changes between deliveries of the same work
	// (receive counts, timestamps of delivery). An empty key, or an error,
	// fails the call before anything runs (ErrNoKey, or the error wrapped).
	// Required for Function; SQSHandler defaults it to the message id
	// (SQSMessageID).
	Key func(ctx context.Context, in In) (string, error)

	// Scope, when set, returns a further scope of the key (a user, a
	// tenant): the same key in two scopes names two records. An error
	// fails the call before anything runs. Defaults to none: keys are
	// scoped by Name only.
	Scope func(ctx context.Context, in In) (string, error)

	// Payload, when set, returns the part of the input a repeat must carry
	// unchanged. A known key with another payload fails with ErrKeyReused, not
	// another input's result. JSON payloads are compared canonically (key order
	// and white space do not count). The key alone decides against records made
	// without Payload, and against any record once Payload is removed. So
	// adding Payload to a running function does not fail the work it already
	// did. Defaults to none: the key alone decides.
	Payload func(in In) ([]byte, error)

	Settings
}

// common is the Config of c's engine: the same Store and Settings.
func (c FunctionConfig[In]) common() Config {
	return Config{Store: c.Store, Settings: c.Settings}
}

// withDefaults returns a copy of c with every zero field but Key set to its
// default.
func (c FunctionConfig[In]) withDefaults() FunctionConfig[In] {
	c.Settings = c.Settings.withDefaults(callOwner)
	return c
}

// validate reports every problem of a defaulted FunctionConfig at once.
func (c FunctionConfig[In]) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("FunctionConfig.Store is nil: pass a Store, e.g. pgstore.New(pool, nil)"))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("FunctionConfig.Name is empty: name the work (e.g. \"record-task-activity\"); it scopes the keys"))
	}
	if c.Key == nil {
		errs = append(errs, errors.New("FunctionConfig.Key is nil: pass a function that returns the input's idempotency key (an event id, a message id)"))
	}
	errs = append(errs, c.Settings.validate("FunctionConfig")...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("idempotency: invalid FunctionConfig: %w", errors.Join(errs...))
}

// Function returns a function that behaves like fn and runs it at most once per
// key (cfg.Key of the input) while the key's record lives. A repeat of a call
// that succeeded gets the first result back, decoded from the JSON it was
// stored as, without running fn. The rules are Wrap's. One claim round trip
// decides. The owner token fences completion and release. An error or a panic
// of fn releases the record: the caller gets fn's own error, and a panic goes
// on. A repeat while the first call runs fails with ErrInProgress. When the
// store cannot be reached, the call fails with a *idemstore.Error and fn does
// not run.
//
// A result that does not encode as JSON, or is larger than the store's largest
// record, cannot be kept. This caller gets it, and every repeat fails with
// ErrResultNotKept without running fn. A repeat gets a kept result as
// json.Unmarshal decodes it into Out. Inside fn, DoNotStore makes the result
// not count, and pgstore's CompleteRunInTx completes the record in fn's own
// transaction.
//
// Function returns an error, and no function, when fn is nil or cfg is
// invalid; the message names the field to fix.
func Function[In, Out any](fn func(context.Context, In) (Out, error), cfg FunctionConfig[In]) (func(context.Context, In) (Out, error), error) {
	if fn == nil {
		return nil, errors.New("idempotency: Function needs a function, got nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &function[In, Out]{cfg: cfg, e: newEngine(cfg.common()), fn: fn, unchecked: payloadHash(cfg.Name, false, nil), shape: observe.ShapeFunction}
	f.unscoped = scopeUserID(cfg.KeyPrefix, cfg.Name, "")
	if _, ok := any(*new(In)).(events.SQSMessage); ok {
		f.shape = observe.ShapeSQS
	}
	return f.call, nil
}

// function is one function made idempotent by Function.
type function[In, Out any] struct {
	cfg FunctionConfig[In]
	e   *engine
	fn  func(context.Context, In) (Out, error)
	// unchecked is the fingerprint of every call made without a payload
	// check (FunctionConfig.Payload nil).
	unchecked string
	// unscoped is the user id of every call without a scope.
	unscoped string
	// shape is the calls' observe shape: an SQS record's or a function's.
	shape string
}

// mismatch reports whether a record's fingerprint refuses a call with
// fingerprint hash: only when both were made with a payload check. A record
// made without one (before Payload was configured) is no evidence that the
// payload differs, nor is a call made without one; the key alone decides.
func (f *function[In, Out]) mismatch(recorded, hash string) bool {
	return recorded != hash && recorded != f.unchecked && hash != f.unchecked
}

// call is the flow of one call: key, claim, then run, replay or refuse.
func (f *function[In, Out]) call(ctx context.Context, in In) (out Out, err error) {
	obs := &observation{start: f.cfg.Clock(), function: f.cfg.Name, method: rpcmethod.From(ctx)}
	ctx = f.e.startSpan(ctx, obs, observe.Call{Shape: f.shape, Function: f.cfg.Name, RPCMethod: obs.method})
	defer func() { obs.emit(ctx, f.cfg.Logger, f.e.metrics) }()

	key, scope, hash, err := f.identify(ctx, in)
	switch {
	case errors.Is(err, ErrNoKey) && f.cfg.AllowMissingKey:
		return f.unprotected(ctx, obs, in)
	case err != nil:
		obs.outcome, obs.err = OutcomeRejected, err
		return out, err
	}
	obs.key, obs.user = key, scope

	tenant := f.cfg.Tenant(ctx)
	if tenant == "" && f.cfg.RequireTenant {
		obs.outcome, obs.err = OutcomeRejected, ErrNoTenant
		return out, ErrNoTenant
	}
	obs.tenant = tenant
	userID, keyRef := f.unscoped, keyID(key)
	if scope != "" {
		userID = scopeUserID(f.cfg.KeyPrefix, f.cfg.Name, scope)
	}
	userID = TenantUserID(tenant, userID)
	ref, res, err := f.e.claim(ctx, obs, userID, keyRef, hash)
	if err == nil && !res.Claimed && res.Record.Status == idemstore.StatusCompleted && res.Record.Response == nil &&
		res.Record.Fingerprint != hash && !f.mismatch(res.Record.Fingerprint, hash) {
		// A completed record of the same key made with or without a payload
		// check where this call is the other way: a store need not return
		// the response of a record whose fingerprint differs, so it is asked
		// for it under the record's own.
		ref, res, err = f.e.claim(ctx, obs, userID, keyRef, res.Record.Fingerprint)
	}
	switch {
	case errors.Is(err, ErrShuttingDown):
		obs.outcome = OutcomeRejected
		return out, err
	case err != nil:
		obs.outcome = OutcomeStoreError
		return out, err
	}
	if !res.Claimed {
		rec := res.Record
		switch {
		case f.mismatch(rec.Fingerprint, hash):
			obs.outcome = OutcomeMismatch
			return out, fmt.Errorf("%w: key %q", ErrKeyReused, obs.identifier(key))
		case rec.Status == idemstore.StatusInProgress:
			obs.outcome = OutcomeInProgress
			return out, fmt.Errorf("%w: key %q", ErrInProgress, obs.identifier(key))
		case rec.Status == idemstore.StatusCompleted && rec.Response != nil && rec.Response.NotKept:
			obs.outcome, obs.reason = OutcomeReplayed, CodeResponseNotKept
			return out, fmt.Errorf("%w: key %q", ErrResultNotKept, obs.identifier(key))
		case rec.Status == idemstore.StatusCompleted && rec.Response != nil:
			obs.outcome = OutcomeReplayed
			if f.cfg.OnReplay != nil {
				f.onReplay(ctx, obs, key, ref, rec)
			}
			if err := json.Unmarshal([]byte(rec.Response.Body), &out); err != nil {
				obs.err = err
				return out, fmt.Errorf("idempotency: the stored result of key %q does not decode as %T: %w", obs.identifier(key), out, err)
			}
			return out, nil
		default:
			obs.outcome = OutcomeStoreError
			obs.err = fmt.Errorf("store returned an unusable record: status %q, response present %t", rec.Status, rec.Response != nil)
			return out, &idemstore.Error{Op: "claim", Err: obs.err}
		}
	}

	state := &runState{e: f.e, ref: ref}
	err = f.e.execute(ctx, state, obs, func(ctx context.Context) (idemstore.Response, bool, error) {
		var err error
		out, err = f.fn(ctx, in)
		if err != nil {
			return idemstore.Response{}, false, err
		}
		resp, err := resultResponse(out)
		if err != nil {
			// fn did its work: the key is completed with the not-kept
			// marker, so that a repeat fails with ErrResultNotKept
			// instead of running fn again.
			obs.err = fmt.Errorf("the result of %s does not encode as JSON: %w", f.cfg.Name, err)
			return notKept(0), true, nil
		}
		return resp, true, nil
	})
	return out, err
}

// identify returns the key, the scope and the payload's fingerprint of in.
func (f *function[In, Out]) identify(ctx context.Context, in In) (key, scope, hash string, err error) {
	key, err = f.cfg.Key(ctx, in)
	if err != nil {
		return "", "", "", fmt.Errorf("idempotency: the key of a %s input: %w", f.cfg.Name, err)
	}
	if key == "" {
		return "", "", "", fmt.Errorf("%w (%s)", ErrNoKey, f.cfg.Name)
	}
	if f.cfg.Scope != nil {
		if scope, err = f.cfg.Scope(ctx, in); err != nil {
			return "", "", "", fmt.Errorf("idempotency: the scope of a %s input: %w", f.cfg.Name, err)
		}
	}
	var payload []byte
	if f.cfg.Payload != nil {
		if payload, err = f.cfg.Payload(in); err != nil {
			return "", "", "", fmt.Errorf("idempotency: the payload of a %s input: %w", f.cfg.Name, err)
		}
	}
	if f.cfg.Payload == nil {
		return key, scope, f.unchecked, nil // computed once, in Function
	}
	return key, scope, payloadHash(f.cfg.Name, true, payload), nil
}

// resultResponse is how a function's result is kept: its JSON as the body
// of a 200 application/json response, so that every Store keeps it as it
// keeps an HTTP response.
func resultResponse(out any) (idemstore.Response, error) {
	body, err := json.Marshal(out)
	if err != nil {
		return idemstore.Response{}, err
	}
	// A result, not an HTTP response: no status, no headers.
	return idemstore.Response{Body: string(body)}, nil
}

// callOwner is the default owner token of a function call: the
// invocation's (defaultOwner), made unique per call.
func callOwner(ctx context.Context) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return defaultOwner(ctx) + "/" + hex.EncodeToString(b[:])
}

// Version strings of the derived identifiers; a change of framing changes
// them, so an old identifier never equals a new one.
const (
	derivedIDVersion   = "ichido-derived-id-v1"
	payloadHashVersion = "ichido-payload-hash-v1"
)

// scopeID is the Store's UserID for a function's scope: a UUID derived from
// the function's name and the scope, since every Store keys records by a
// UUID user.
func scopeID(name, scope string) string { return derivedUUID("scope", name, scope) }

// keyID is the Store's Key for a function's key: a UUID derived from it, so
// that any key (a message id, an event id, a long string) fits the Store's
// 36-character keys.
func keyID(key string) string { return derivedUUID("key", key) }

// derivedUUID returns a UUID version 8 (RFC 9562's custom version) made of
// the first 122 bits of a SHA-256 over the framed parts.
func derivedUUID(parts ...string) string {
	f := fingerprinters.Get().(*fingerprinter)
	defer fingerprinters.Put(f)
	f.h.Reset()
	f.part(bytesOf(derivedIDVersion))
	for _, p := range parts {
		f.part(bytesOf(p))
	}
	var b [16]byte
	copy(b[:], f.h.Sum(f.sum[:0]))
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

// payloadHash is a function call's fingerprint: over the function's name
// and, when a Payload function is configured, the payload (canonicalised
// as the request fingerprint canonicalises a JSON body, when it is JSON).
// Without one every call of the function has the same fingerprint, so that
// the key alone decides.
func payloadHash(name string, checked bool, payload []byte) string {
	f := fingerprinters.Get().(*fingerprinter)
	defer fingerprinters.Put(f)
	head := func(kind string) {
		f.h.Reset()
		f.part(bytesOf(payloadHashVersion))
		f.part(bytesOf(name))
		f.part(bytesOf(kind))
	}
	switch {
	case !checked:
		head("none")
	default:
		head("json")
		if !canonjson.WriteBuffered(f.h, payload, &f.canon) {
			head("raw")
			f.part(payload)
		}
	}
	hex.Encode(f.hex[:], f.h.Sum(f.sum[:0]))
	return string(f.hex[:])
}

// FunctionRecordID returns the user id and the record key of the record of
// a call of the function name (FunctionConfig.Name) with key, in scope,
// under prefix (FunctionConfig.KeyPrefix).
//
// Key is FunctionConfig.Key's result (for SQSHandler, by default the
// message id), and scope FunctionConfig.Scope's ("" without one). Both ids
// are UUIDs derived from those strings, so an operator cannot read them off
// a record: this call computes them. It fails when name or key is empty or
// the prefix is not a valid KeyPrefix.
func FunctionRecordID(prefix, name, scope, key string) (userID, recordKey string, err error) {
	switch {
	case name == "":
		return "", "", errors.New("idempotency: the function's name is empty")
	case key == "":
		return "", "", errors.New("idempotency: the key is empty")
	}
	if err := validateKeyPrefix("FunctionConfig", prefix); err != nil {
		return "", "", fmt.Errorf("idempotency: %w", err)
	}
	userID, recordKey = functionRecordID(prefix, name, scope, key)
	return userID, recordKey, nil
}

// functionRecordID is FunctionRecordID of a valid name, key and prefix.
func functionRecordID(prefix, name, scope, key string) (userID, recordKey string) {
	return scopeUserID(prefix, name, scope), keyID(key)
}

// scopeUserID is the user id of functionRecordID.
func scopeUserID(prefix, name, scope string) string {
	if prefix == "" {
		return scopeID(name, scope)
	}
	return derivedUUID("prefixed-scope", prefix, name, scope)
}
