package connectidem

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/rpcidem"
)

// Name is the FunctionConfig.Name the records are kept under. Package
// grpcidem keeps its records under the same name, key and fingerprint, so
// that a service served both ways on one store shares its keys.
const Name = "rpc"

// Config configures NewInterceptor. Store and Subject are required; the zero
// value of every other field takes the documented default.
type Config struct {
	// Store keeps the records. Required.
	Store idemstore.Store

	// Subject returns the authenticated subject of a call. It must read only
	// what authenticated the call, never a header a client sets freely. That is
	// what an authentication middleware or interceptor put into ctx after
	// verifying the caller, such as connectrpc.com/authn's GetInfo.
	// idempotency.SubjectUUID maps the subject to the user id kept, so keys are
	// scoped per user. "" or an error (logged, never sent) refuses the call
	// with CodeUnauthenticated; the handler does not run. Required.
	Subject func(ctx context.Context) (string, error)

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
// protocols alike.
//
// The first call with a key runs the handler. A repeat gets its response,
// or its stored error, back with the header Idempotent-Replayed: true.
// Every other outcome is an error whose code has gRPC's meaning (see the
// package documentation). Streaming procedures
// and client calls pass through untouched. Pass it to the handlers with
// connect.WithInterceptors, after the interceptors that authenticate.
//
// It returns an error, and no interceptor, when cfg is invalid; the
// message names the field to fix.
func NewInterceptor(cfg Config) (connect.Interceptor, error) {
	if cfg.Types == nil {
		cfg.Types = protoregistry.GlobalTypes
	}
	engine, err := rpcidem.New(framework, rpcidem.Config{
		Store:     cfg.Store,
		Subject:   cfg.Subject,
		KeyFormat: cfg.KeyFormat,
		Settings:  cfg.Settings,
	})
	if err != nil {
		return nil, err
	}
	return &interceptor{cfg: cfg, engine: engine}, nil
}

// framework is what the shared engine needs to know of Connect.
var framework = rpcidem.Framework[connect.AnyRequest, connect.AnyResponse]{
	Package:    "connectidem",
	Name:       Name,
	KeyName:    idempotency.HeaderName,
	KeyCarrier: "header",
	Target:     "procedure",
	Request:    request,
	CodeOf:     codeOf,
	Encode:     encode,
}

// interceptor is one NewInterceptor.
type interceptor struct {
	cfg    Config
	engine *rpcidem.Engine[connect.AnyRequest, connect.AnyResponse]
}

// WrapUnary protects the handler's unary calls.
func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient || !i.protected(spec) {
			return next(ctx, req)
		}
		out, err := i.engine.Call(ctx, spec.Procedure, req, req.Header().Values(idempotency.HeaderName), next)
		if err != nil {
			return nil, refusal(i.engine.Refuse(err))
		}
		if out.Ran {
			if out.Err != nil {
				return nil, out.Err
			}
			return out.Response, nil
		}
		return replay(out.Replay, i.cfg.Types)
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
