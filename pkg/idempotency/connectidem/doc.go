// Package connectidem gives a Connect service (connectrpc.com/connect) the
// idempotency contract of package idempotency. It works over the Connect,
// gRPC and gRPC-Web protocols alike. A client sends an Idempotency-Key header
// with a unary call. Every retry of the same call with the same key gets the
// first response back instead of running the procedure again.
//
//	store, err := pgstore.New(pool, nil)
//	if err != nil {
//		return err
//	}
//	idem, err := connectidem.NewInterceptor(connectidem.Config{
//		Store:   store,
//		Subject: func(ctx context.Context) (string, error) {
//			return auth.Subject(ctx) // what your authentication middleware verified
//		},
//	})
//	if err != nil {
//		return err // an invalid Config; the message names the field
//	}
//	mux.Handle(tasksv1connect.NewTasksServiceHandler(tasks, connect.WithInterceptors(idem)))
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
// The key is the request header Idempotency-Key (idempotency.HeaderName;
// idempotency-key in gRPC metadata), of Config.KeyFormat, bare or quoted, as in
// Middleware. The user is Config.Subject's subject, mapped by
// idempotency.SubjectUUID: keys are scoped per user. The fingerprint is the
// procedure and the request message in protobuf's deterministic encoding,
// whatever the codec on the wire. The same key on another procedure, or with
// another message, is refused. Package grpcidem keeps its records the same way,
// so a service served by both shares its keys.
//
// # The answer
//
//	situation                                code                error reason
//	first call                               the handler's       -
//	repeat of a completed call               the stored answer   - (header Idempotent-Replayed: true)
//	same key, another procedure or message   FailedPrecondition  IDEMPOTENCY_KEY_REUSED
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
// google.rpc.RetryInfo of one second and the header Retry-After: 1. With
// Settings.WaitForResult a repeat of a running call waits for its answer
// instead of Aborted.
//
// A replay is the first call's response message, decoded into a new message of
// its type (found by name in Config.Types). Or it is the error the first call
// failed with: code, message and details. What is kept: the response message,
// and the errors whose codes Storable reports (InvalidArgument,
// FailedPrecondition, OutOfRange, Unauthenticated, PermissionDenied, NotFound:
// what the HTTP shapes keep as 4xx). Any other error, and a panic, releases the
// key: the client's retry runs the handler again. Response headers and trailers
// are not kept.
//
// Inside the server, a replayed connect.AnyResponse is not the handler's
// *connect.Response[T], since Go cannot name that type at run time. Its
// Any() is a proto.Message whose reflection is the response type's. Every
// codec and protobuf function sees that type, but a type assertion to *T
// fails. Mount interceptors that assert the message's Go type inside this
// one.
//
// # Which procedures
//
// Every unary procedure is protected, except those whose idempotency level
// is NO_SIDE_EFFECTS (Connect's GET procedures); Config.Methods chooses
// others. Streaming procedures and client calls pass through untouched. A
// protected call without a key is refused unless Settings.AllowMissingKey
// lets it run unprotected.
//
// The full contract is documented in the project's gRPC guide.
package connectidem
