package connectidem

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Name is the FunctionConfig.Name the records are kept under. Package
// grpcidem keeps its records under the same name, key and fingerprint, so
// that a service served both ways on one store shares its keys.
const Name = "rpc"

// Config configures NewInterceptor. Store and UserID are required; the zero
// value of every other field takes the documented default.
type Config struct {
	// Store keeps the records. Required.
	Store idemstore.Store

	// UserID returns the authenticated subject of a call. It must read only
	// what authenticated the call (what an authentication middleware or
	// interceptor put into ctx after verifying the caller, such as
	// connectrpc.com/authn's GetInfo), never a header a client sets freely.
	// idempotency.SubjectUUID maps the subject to the user id kept, so keys
	// are scoped per user. "" or an error (logged, never sent) refuses the
	// call with CodeUnauthenticated; the handler does not run. Required.
	UserID func(ctx context.Context) (string, error)

	// KeyFormat is what a key must look like: idempotency.KeyUUIDv4 or
	// idempotency.KeyOpaque, bare or as an RFC 8941 quoted string, as in
	// the HTTP header. Defaults to idempotency.KeyUUIDv4.
	KeyFormat idempotency.KeyFormat

	// Methods reports whether calls of the unary procedure
	// ("/package.Service/Method") are protected. Any other call passes
	// straight to the handler without touching the Store, even with a key.
	// When set, it alone decides. Defaults to every unary procedure except
	// those whose idempotency level is connect.IdempotencyNoSideEffects
	// (generated from idempotency_level = NO_SIDE_EFFECTS, and the only
	// ones Connect serves over GET).
	Methods func(procedure string) bool

	// Types finds the response message type a stored record names, to
	// replay it. Defaults to protoregistry.GlobalTypes, which holds every
	// generated message type linked into the program.
	Types protoregistry.MessageTypeResolver

	idempotency.Settings
}

// NewInterceptor returns a Connect interceptor that makes the unary calls
// of protected procedures idempotent, over the Connect, gRPC and gRPC-Web
// protocols alike: the first call with a key runs the handler, a repeat
// gets its response (or its stored error) back with the header
// Idempotent-Replayed: true, and every other outcome is an error whose code
// has gRPC's meaning (see the package documentation). Streaming procedures
// and client calls pass through untouched. Pass it to the handlers with
// connect.WithInterceptors, after the interceptors that authenticate.
//
// It returns an error, and no interceptor, when cfg is invalid; the
// message names the field to fix.
func NewInterceptor(cfg Config) (connect.Interceptor, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("Config.Store is nil: pass a Store, e.g. pgstore.New(pool, nil)"))
	}
	if cfg.UserID == nil {
		errs = append(errs, errors.New("Config.UserID is nil: pass a function that returns the authenticated subject of a call"))
	}
	if cfg.KeyFormat != idempotency.KeyUUIDv4 && cfg.KeyFormat != idempotency.KeyOpaque {
		errs = append(errs, fmt.Errorf("Config.KeyFormat is %s: use idempotency.KeyUUIDv4 or idempotency.KeyOpaque", cfg.KeyFormat))
	}
	if cfg.Types == nil {
		cfg.Types = protoregistry.GlobalTypes
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("connectidem: invalid Config: %w", errors.Join(errs...))
	}
	fn, err := idempotency.Function(run, idempotency.FunctionConfig[*call]{
		Store:    cfg.Store,
		Name:     Name,
		Key:      callKey,
		Scope:    callScope,
		Payload:  callPayload,
		Settings: cfg.Settings,
	})
	if err != nil {
		// Only the Settings can be invalid here; their fields are named as
		// FunctionConfig's, which Config embeds the same.
		return nil, fmt.Errorf("connectidem: invalid Config: %w", err)
	}
	return &interceptor{cfg: cfg, fn: fn}, nil
}

// interceptor is one NewInterceptor.
type interceptor struct {
	cfg Config
	fn  func(context.Context, *call) (result, error)
}

// call is one protected call: what Function keys, scopes and fingerprints.
type call struct {
	procedure string
	req       connect.AnyRequest
	next      connect.UnaryFunc
	// refused is set when the call is refused before the store is
	// consulted (no user, a malformed key).
	refused error
	userID  string
	idemKey string
}

func callKey(_ context.Context, c *call) (string, error) { return c.idemKey, c.refused }

func callScope(_ context.Context, c *call) (string, error) { return c.userID, nil }

func callPayload(c *call) ([]byte, error) {
	m, ok := c.req.Any().(proto.Message)
	if !ok {
		return nil, fmt.Errorf("the request of %s is a %T, not a protobuf message", c.procedure, c.req.Any())
	}
	return fingerprint(c.procedure, m)
}

// WrapUnary protects the handler's unary calls.
func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient || !i.protected(spec) {
			return next(ctx, req)
		}
		c := &call{procedure: spec.Procedure, req: req, next: next}
		c.identify(ctx, i.cfg)
		out, err := i.fn(ctx, c)
		if err != nil {
			return nil, refusal(err)
		}
		if out.ran {
			if out.err != nil {
				return nil, out.err
			}
			return out.resp, nil
		}
		return out.replay(i.cfg.Types)
	}
}

// WrapStreamingClient passes client streams through.
func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler passes streaming procedures through: only unary
// calls are protected.
func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (i *interceptor) protected(spec connect.Spec) bool {
	if i.cfg.Methods != nil {
		return i.cfg.Methods(spec.Procedure)
	}
	return spec.IdempotencyLevel != connect.IdempotencyNoSideEffects
}

// identify reads the call's user and key; a refusal waits in c.refused for
// Function to log it, the user's first, as the HTTP shapes check it first.
func (c *call) identify(ctx context.Context, cfg Config) {
	subject, err := cfg.UserID(ctx)
	switch {
	case err != nil:
		c.refused = &unauthenticatedError{err}
		return
	case subject == "":
		c.refused = &unauthenticatedError{errors.New("UserID returned no subject")}
		return
	}
	c.userID = idempotency.SubjectUUID(subject)
	values := c.req.Header().Values(idempotency.HeaderName)
	if len(values) == 0 {
		return // ErrNoKey, or an unprotected run with AllowMissingKey
	}
	c.idemKey, c.refused = parseKey(values, cfg.KeyFormat)
}

// run is the work Function runs once per key: the handler. Its error is
// kept when its code is one a retry would get again (Storable), and
// released otherwise.
func run(ctx context.Context, c *call) (result, error) {
	resp, err := c.next(ctx, c.req)
	if err != nil {
		if Storable(connect.CodeOf(err)) {
			return result{ran: true, err: err}, nil
		}
		return result{}, &handlerError{err}
	}
	return result{ran: true, resp: resp}, nil
}
