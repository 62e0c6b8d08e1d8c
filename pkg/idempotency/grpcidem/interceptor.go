package grpcidem

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// MetadataKey is the request metadata that carries the idempotency key.
const MetadataKey = "idempotency-key"

// ReplayedKey is the response header metadata set to "true" on every replay
// (idempotency.ReplayedHeader, in the lower case of gRPC metadata).
const ReplayedKey = "idempotent-replayed"

// Name is the FunctionConfig.Name the records are kept under. Package
// connectidem keeps its records under the same name, key and fingerprint,
// so that a service served both ways on one store shares its keys.
const Name = "rpc"

// Config configures UnaryServerInterceptor. Store and UserID are required;
// the zero value of every other field takes the documented default.
type Config struct {
	// Store keeps the records. Required.
	Store idemstore.Store

	// UserID returns the authenticated subject of a call. It must read only
	// what authenticated the call (what an authentication interceptor put
	// into ctx after verifying the caller's token, or the peer's verified
	// TLS identity, peer.FromContext), never metadata a client sets freely.
	// idempotency.SubjectUUID maps the subject to the user id kept, so keys
	// are scoped per user. "" or an error (logged, never sent) refuses the
	// call with Unauthenticated; the handler does not run. Required.
	UserID func(ctx context.Context) (string, error)

	// KeyFormat is what a key must look like: idempotency.KeyUUIDv4 or
	// idempotency.KeyOpaque, bare or as an RFC 8941 quoted string, as in
	// the HTTP header. Defaults to idempotency.KeyUUIDv4.
	KeyFormat idempotency.KeyFormat

	// Methods reports whether calls of the unary method fullMethod
	// ("/package.Service/Method") are protected. Any other call passes
	// straight to the handler without touching the Store, even with a key.
	// When set, it alone decides. Defaults to every unary method except
	// those whose descriptor (found in protoregistry.GlobalFiles) declares
	// idempotency_level = NO_SIDE_EFFECTS, gRPC's counterpart of GET.
	Methods func(fullMethod string) bool

	// Types finds the response message type a stored record names, to
	// replay it. Defaults to protoregistry.GlobalTypes, which holds every
	// generated message type linked into the program.
	Types protoregistry.MessageTypeResolver

	idempotency.Settings
}

// UnaryServerInterceptor returns a gRPC unary server interceptor that makes
// the calls of protected methods idempotent: the first call with a key runs
// the handler, a repeat gets its response (or its stored error) back with
// ReplayedKey set, and every other outcome is a status whose code has
// gRPC's meaning (see the package documentation). Streaming methods never
// reach a unary interceptor: they run untouched.
//
// It returns an error, and no interceptor, when cfg is invalid; the
// message names the field to fix.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
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
	if cfg.Methods == nil {
		cfg.Methods = hasSideEffects
	}
	if cfg.Types == nil {
		cfg.Types = protoregistry.GlobalTypes
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("grpcidem: invalid Config: %w", errors.Join(errs...))
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
		return nil, fmt.Errorf("grpcidem: invalid Config: %w", err)
	}
	i := &interceptor{cfg: cfg, fn: fn}
	return i.intercept, nil
}

// interceptor is one UnaryServerInterceptor.
type interceptor struct {
	cfg Config
	fn  func(context.Context, *call) (result, error)
}

// call is one protected call: what Function keys, scopes and fingerprints.
type call struct {
	method  string
	req     any
	handler grpc.UnaryHandler
	// refused is set when the call is refused before the store is
	// consulted (no user, a malformed key).
	refused error
	userID  string
	idemKey string
}

func callKey(_ context.Context, c *call) (string, error) { return c.idemKey, c.refused }

func callScope(_ context.Context, c *call) (string, error) { return c.userID, nil }

func callPayload(c *call) ([]byte, error) {
	m, ok := c.req.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("the request of %s is a %T, not a protobuf message", c.method, c.req)
	}
	return fingerprint(c.method, m)
}

func (i *interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !i.cfg.Methods(info.FullMethod) {
		return handler(ctx, req)
	}
	c := &call{method: info.FullMethod, req: req, handler: handler}
	c.identify(ctx, i.cfg)
	out, err := i.fn(ctx, c)
	if err != nil {
		return nil, refusal(err)
	}
	if out.ran {
		return out.msg, out.err
	}
	// A replay. The header cannot have been sent: the handler did not run.
	_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedKey, "true"))
	return out.replay(i.cfg.Types)
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
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get(MetadataKey)
	if len(values) == 0 {
		return // ErrNoKey, or an unprotected run with AllowMissingKey
	}
	c.idemKey, c.refused = parseKey(values, cfg.KeyFormat)
}

// run is the work Function runs once per key: the handler. Its error is
// kept when its code is one a retry would get again (Storable), and
// released otherwise.
func run(ctx context.Context, c *call) (result, error) {
	resp, err := c.handler(ctx, c.req)
	if err != nil {
		if Storable(codeOf(err)) {
			return result{ran: true, err: err}, nil
		}
		return result{}, &handlerError{err}
	}
	return result{ran: true, msg: resp}, nil
}

// hasSideEffects is the default Config.Methods: every method but those
// declared NO_SIDE_EFFECTS in their registered descriptor.
func hasSideEffects(fullMethod string) bool {
	name := strings.ReplaceAll(strings.TrimPrefix(fullMethod, "/"), "/", ".")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return true
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return true
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	return !ok || opts.GetIdempotencyLevel() != descriptorpb.MethodOptions_NO_SIDE_EFFECTS
}
