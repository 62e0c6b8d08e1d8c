package grpcidem

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/rpcidem"
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

// Config configures UnaryServerInterceptor. Store and Subject are required;
// the zero value of every other field takes the documented default.
type Config struct {
	// Store keeps the records. Required.
	Store idemstore.Store

	// Subject returns the authenticated subject of a call. It must read only
	// what authenticated the call, never metadata a client sets freely. That is
	// what an authentication interceptor put into ctx after verifying the
	// caller's token, or the peer's verified TLS identity (peer.FromContext).
	// idempotency.SubjectUUID maps the subject to the user id kept, so keys are
	// scoped per user. "" or an error (logged, never sent) refuses the call
	// with Unauthenticated; the handler does not run. Required.
	Subject func(ctx context.Context) (string, error)

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
// the calls of protected methods idempotent.
//
// The first call with a key runs the handler. A repeat gets its response,
// or its stored error, back with ReplayedKey set. Every other outcome is a
// status whose code has gRPC's meaning (see the package documentation). Streaming methods never
// reach a unary interceptor: they run untouched.
//
// It returns an error, and no interceptor, when cfg is invalid; the
// message names the field to fix.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	if cfg.Methods == nil {
		cfg.Methods = hasSideEffects
	}
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
	i := &interceptor{cfg: cfg, engine: engine}
	return i.intercept, nil
}

// framework is what the shared engine needs to know of gRPC.
var framework = rpcidem.Framework[any, any]{
	Package:    "grpcidem",
	Name:       Name,
	KeyName:    MetadataKey,
	KeyCarrier: "metadata",
	Target:     "method",
	Request:    request,
	CodeOf:     codeOf,
	Encode:     encode,
}

// interceptor is one UnaryServerInterceptor.
type interceptor struct {
	cfg    Config
	engine *rpcidem.Engine[any, any]
}

func (i *interceptor) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !i.cfg.Methods(info.FullMethod) {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	out, err := i.engine.Call(ctx, info.FullMethod, req, md.Get(MetadataKey), handler)
	if err != nil {
		return nil, refusal(i.engine.Refuse(err))
	}
	if out.Ran {
		return out.Response, out.Err
	}
	// A replay. The header cannot have been sent: the handler did not run.
	_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedKey, "true"))
	return replay(out.Replay, i.cfg.Types)
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
