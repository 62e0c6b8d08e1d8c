package rpcidem

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/rpcmethod"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// Config is what the adapters' Configs share; each field means what the
// adapter's field of the same name documents.
type Config struct {
	Store     idemstore.Store
	Subject   func(ctx context.Context) (string, error)
	KeyFormat idempotency.KeyFormat
	Settings  idempotency.Settings
}

// Framework is what an Engine knows of an adapter's framework, whose
// handlers take a Req and answer a Resp.
type Framework[Req, Resp any] struct {
	// Package names the adapter in its errors: "grpcidem".
	Package string
	// Name is the FunctionConfig.Name the records are kept under. The
	// adapters keep theirs under the same, so that a service served both
	// ways on one store shares its keys.
	Name string
	// KeyName is the name of the key's metadata or header, as refusals
	// name it: "idempotency-key".
	KeyName string
	// KeyCarrier is what carries the key, as refusals name it: "metadata",
	// "header".
	KeyCarrier string
	// Target is what a call calls, as refusals name it: "method",
	// "procedure".
	Target string

	// Request returns the request in protobuf's deterministic encoding,
	// for the fingerprint; an error when it is no protobuf message.
	Request func(method string, req Req) ([]byte, error)
	// CodeOf returns the code of a handler's error: its status's, Unknown
	// for an error that holds none.
	CodeOf func(err error) Code
	// Encode encodes what a handler answered, to keep it: err when it is
	// not nil (a Status), resp otherwise (a Type and Message).
	Encode func(resp Resp, err error) (Answer, error)
}

// Engine runs the protected calls of one interceptor on
// idempotency.Function.
type Engine[Req, Resp any] struct {
	fw        Framework[Req, Resp]
	subject   func(ctx context.Context) (string, error)
	keyFormat idempotency.KeyFormat
	fn        func(context.Context, *call[Req, Resp]) (Result[Resp], error)
	digest    []byte // Settings.LogDigestSecret
}

// New returns the Engine of an interceptor configured with cfg. It returns
// an error, and no Engine, when cfg is invalid; the message names the
// adapter's Config field to fix.
func New[Req, Resp any](fw Framework[Req, Resp], cfg Config) (*Engine[Req, Resp], error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("Config.Store is nil: pass a Store, e.g. pgstore.New(pool, nil)"))
	}
	if cfg.Subject == nil {
		errs = append(errs, errors.New("Config.Subject is nil: pass a function that returns the authenticated subject of a call"))
	}
	if cfg.KeyFormat != idempotency.KeyUUIDv4 && cfg.KeyFormat != idempotency.KeyOpaque {
		errs = append(errs, fmt.Errorf("Config.KeyFormat is %s: use idempotency.KeyUUIDv4 or idempotency.KeyOpaque", cfg.KeyFormat))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: invalid Config: %w", fw.Package, errors.Join(errs...))
	}
	e := &Engine[Req, Resp]{fw: fw, subject: cfg.Subject, keyFormat: cfg.KeyFormat, digest: cfg.Settings.LogDigestSecret}
	fn, err := idempotency.Function(e.run, idempotency.FunctionConfig[*call[Req, Resp]]{
		Store:    cfg.Store,
		Name:     fw.Name,
		Key:      callKey[Req, Resp],
		Scope:    callScope[Req, Resp],
		Payload:  e.payload,
		Settings: cfg.Settings,
	})
	if err != nil {
		// Only the Settings can be invalid here; their fields are named as
		// FunctionConfig's, which the adapters' Configs embed the same.
		return nil, fmt.Errorf("%s: invalid Config: %w", fw.Package, err)
	}
	e.fn = fn
	return e, nil
}

// Call runs one protected call of method with request req: handler runs at
// most once per key, keys holds the values of the key metadata or header.
// A call that ran the handler gives its own answer (Result.Ran), an error
// the handler answered included; a repeat gives the kept answer to replay.
// Any other outcome is an error for Refuse.
func (e *Engine[Req, Resp]) Call(ctx context.Context, method string, req Req, keys []string, handler func(context.Context, Req) (Resp, error)) (Result[Resp], error) {
	c := &call[Req, Resp]{method: method, req: req, handler: handler}
	e.identify(ctx, c, keys)
	out, err := e.fn(rpcmethod.With(ctx, method), c)
	var h *handlerError
	if errors.As(err, &h) {
		return Result[Resp]{Ran: true, Err: h.err}, nil
	}
	if errors.Is(err, idempotency.ErrNoKey) {
		err = &noKeyError{method: method, err: err}
	}
	return out, err
}

// call is one protected call: what Function keys, scopes and fingerprints.
type call[Req, Resp any] struct {
	method  string
	req     Req
	handler func(context.Context, Req) (Resp, error)
	// refused is set when the call is refused before the store is
	// consulted (no user, a malformed key).
	refused error
	userID  string
	idemKey string
	// subject and keys are the call's identifiers as sent, which the
	// handler's error may quote (logText).
	subject string
	keys    []string
}

func callKey[Req, Resp any](_ context.Context, c *call[Req, Resp]) (string, error) {
	return c.idemKey, c.refused
}

func callScope[Req, Resp any](_ context.Context, c *call[Req, Resp]) (string, error) {
	return c.userID, nil
}

func (e *Engine[Req, Resp]) payload(c *call[Req, Resp]) ([]byte, error) {
	b, err := e.fw.Request(c.method, c.req)
	if err != nil {
		return nil, err
	}
	return fingerprint(c.method, b), nil
}

// identify reads the call's user and key; a refusal waits in c.refused for
// Function to log it, the user's first, as the HTTP shapes check it first.
func (e *Engine[Req, Resp]) identify(ctx context.Context, c *call[Req, Resp], keys []string) {
	subject, err := e.subject(ctx)
	switch {
	case err != nil:
		c.refused = &unauthenticatedError{err}
		return
	case subject == "":
		c.refused = &unauthenticatedError{errors.New("Config.Subject returned no subject")}
		return
	}
	c.userID, c.subject, c.keys = idempotency.SubjectUUID(subject), subject, keys
	if len(keys) == 0 {
		return // ErrNoKey, or an unprotected run with AllowMissingKey
	}
	c.idemKey, c.refused = parseKey(keys, e.keyFormat, e.fw.KeyCarrier)
}

// run is the work Function runs once per key: the handler. Its error is
// kept when its code is one a retry would get again (Storable), and
// released otherwise.
func (e *Engine[Req, Resp]) run(ctx context.Context, c *call[Req, Resp]) (Result[Resp], error) {
	resp, err := c.handler(ctx, c.req)
	if err != nil {
		if Storable(e.fw.CodeOf(err)) {
			return Result[Resp]{Ran: true, Err: err, encode: e.fw.Encode}, nil
		}
		return Result[Resp]{}, &handlerError{err: err, text: e.logText(c, err)}
	}
	return Result[Resp]{Ran: true, Response: resp, encode: e.fw.Encode}, nil
}

// handlerError carries a handler's error that was not kept through
// Function, so that the caller gets it unchanged.
type handlerError struct {
	err  error
	text string // err's text as the log line shows it (logText)
}

func (e *handlerError) Error() string { return e.text }

// logText is err's text with, under Settings.LogDigestSecret, the call's
// subject and keys as sent replaced by their digests: the log line
// carries a handler's error, which may quote them.
func (e *Engine[Req, Resp]) logText(c *call[Req, Resp], err error) string {
	text := err.Error()
	if e.digest == nil {
		return text
	}
	for _, v := range append([]string{c.subject}, c.keys...) {
		if len(v) >= 4 {
			text = strings.ReplaceAll(text, v, observe.Digest(e.digest, v))
		}
	}
	return text
}
func (e *handlerError) Unwrap() error { return e.err }
