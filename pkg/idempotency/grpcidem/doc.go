// Package grpcidem gives a gRPC server the idempotency contract of package
// idempotency. A client sends an idempotency-key with a unary call. Every
// retry of the same call with the same key gets the first response back
// instead of running the method again.
//
//	store, err := pgstore.New(pool, nil)
//	if err != nil {
//		return err
//	}
//	idem, err := grpcidem.UnaryServerInterceptor(grpcidem.Config{
//		Store:   store,
//		Subject: func(ctx context.Context) (string, error) {
//			return auth.Subject(ctx) // what your authentication interceptor verified
//		},
//	})
//	if err != nil {
//		return err // an invalid Config; the message names the field
//	}
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, idem))
//
// It runs on idempotency.Function's engine, so every store and every Settings
// field works as it does for a Lambda handler. One claim round trip decides.
// The lease ends at the client's deadline plus LeaseMargin. A call without a
// deadline holds a Heartbeat lease, renewed while it runs. An owner token
// fences completion and release. Nothing runs while the store cannot be
// reached.
//
// # The call
//
// The key is the request metadata idempotency-key (MetadataKey), of
// Config.KeyFormat, bare or quoted, as the HTTP header's. The user is
// Config.Subject's subject, mapped by idempotency.SubjectUUID: keys are
// scoped per user. The fingerprint is the full method name and the request
// message in protobuf's deterministic encoding: the same key on another
// method, or with another message, is refused.
//
// # The answer
//
//	situation                                code                error reason
//	first call                               the handler's       -
//	repeat of a completed call               the stored answer   - (header idempotent-replayed: true)
//	same key, another method or message      FailedPrecondition  IDEMPOTENCY_KEY_REUSED
//	same key while the first call runs       Aborted (retry)     IDEMPOTENCY_KEY_IN_USE
//	missing key                              InvalidArgument     IDEMPOTENCY_KEY_MISSING
//	malformed key                            InvalidArgument     IDEMPOTENCY_KEY_INVALID
//	no authenticated user                    Unauthenticated     UNAUTHENTICATED
//	store unreachable or failing             Unavailable (retry) IDEMPOTENCY_STORE_UNAVAILABLE
//	store refusing for good                  Internal            IDEMPOTENCY_STORE_MISCONFIGURED
//	repeat of a call whose answer            FailedPrecondition  IDEMPOTENCY_RESPONSE_NOT_KEPT
//	was not kept
//
// Every refusal carries a google.rpc.ErrorInfo (domain ErrorDomain) whose
// reason is the library's code in upper case; those marked (retry) carry a
// google.rpc.RetryInfo of one second. With Settings.WaitForResult a repeat
// of a running call waits for its answer instead of Aborted.
//
// A replay is a new message of the method's response type (found by name in
// Config.Types), decoded from the bytes the first call answered. Or it is the
// status the first call failed with. What is kept: the response message, and
// the errors whose codes Storable reports (InvalidArgument, FailedPrecondition,
// OutOfRange, Unauthenticated, PermissionDenied, NotFound: what the HTTP shapes
// keep as 4xx). Any other error, and a panic, releases the key: the client's
// retry runs the handler again. Response header and trailer metadata are not
// kept.
//
// # Which methods
//
// Every unary method is protected, except those declared idempotency_level
// = NO_SIDE_EFFECTS; Config.Methods chooses others. Streaming methods never
// reach a unary interceptor: this package has none for streams, and they
// run untouched. A protected call without a key is refused unless
// Settings.AllowMissingKey lets it run unprotected.
//
// The full contract, and how it meets Connect's (package connectidem
// shares the records), is documented in the project's gRPC guide.
package grpcidem
