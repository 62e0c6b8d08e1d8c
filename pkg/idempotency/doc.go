// Package idempotency makes work idempotent on AWS, whatever triggers it:
// the mutating endpoints of an HTTP handler (API Gateway REST and HTTP
// APIs, Lambda Function URLs, ALB targets, any net/http server), where a
// client sends an Idempotency-Key header and every retry of the same
// request with the same key gets the first response back instead of
// running the work again; the records of an SQS batch; and any typed
// function, keyed by a part of its input.
//
// Every shape runs the same flow on the same Store: one claim round trip,
// a lease that ends at the invocation's deadline, completion and release
// fenced by the owner token, a release when the work fails or panics, and
// no work at all while the store cannot be reached. docs/triggers.md
// compares what each shape keys on and what a repeat gets.
//
// # Shapes
//
//	Wrap            events.APIGatewayV2HTTPRequest, events.APIGatewayProxyRequest,
//	                events.LambdaFunctionURLRequest, events.ALBTargetGroupRequest
//	Middleware      func(http.Handler) http.Handler: the same HTTP contract for a
//	                plain net/http server (ECS, EC2, the Lambda Web Adapter), chi, …
//	Function        any func(context.Context, In) (Out, error), keyed by
//	                FunctionConfig.Key, the result stored as JSON
//	SQSHandler      an SQS event source mapping with ReportBatchItemFailures
//
// The user of an HTTP shape comes from what authenticated the request:
// ClaimsSubject and AuthorizerContextField for API Gateway authorizers,
// IAMPrincipal for a Function URL with AuthType AWS_IAM, ALBOIDC for an ALB
// rule that authenticates users, BearerToken where the function verifies a
// token itself, ContextUserID for Middleware behind an authentication
// middleware, StaticUserID where there is no caller identity at all.
//
// # Wrapping a handler
//
// Wrap decorates a handler of any of the HTTP payloads above and returns a
// handler of the same type:
//
//	h, err := idempotency.Wrap(createTask, idempotency.Config{
//		Store: pgstore.New(pool, nil),
//	})
//	if err != nil {
//		return err // an invalid Config; the message says which field
//	}
//	lambda.Start(h)
//
// Config.Store is the only required field; every other field has a
// documented default. Inside the handler, FromContext gives the key, the
// user and the request's fingerprint.
//
// # Which requests
//
// POST, PATCH and DELETE are protected by default (Config.Methods; PUT may
// be added). Every other method, and always GET, HEAD and OPTIONS, passes
// straight through to the handler without touching the store.
//
// A protected request must carry:
//
//   - an authenticated user, taken only from what API Gateway's authorizer
//     filled in (by default the "sub" claim of a JWT or Cognito authorizer,
//     see Config.UserID), which must be a UUID; otherwise 401
//     "unauthenticated";
//   - the header Idempotency-Key (any case; v1 multiValueHeaders count too)
//     holding a UUID version 4, bare or as an RFC 8941 quoted string
//     ("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""), compared in lower case.
//     A missing header gives 400 "idempotency_key_missing"; anything else
//     that is not one v4 UUID (empty, another version, two different values,
//     an HTTP API's comma-joined repeat with different values) gives 400
//     "idempotency_key_invalid";
//   - a body of at most Config.MaxBodyBytes bytes as API Gateway delivers it
//     (6 MiB by default, the most a Lambda invocation carries; base64 text
//     counts as sent); otherwise 413 "payload_too_large".
//
// These checks run in that order, before the store is consulted, and the
// handler does not run when one fails. Keys are scoped per user: two users
// sending the same key name two independent records.
//
// # The fingerprint
//
// Each record keeps a fingerprint of its request (see Fingerprint): the
// method, the concrete path, the query parameters sorted by name, and the
// body, a JSON body canonicalised first so that a retry that re-serialises
// the same object matches. The same key sent with a different request gives
// 422 "idempotency_key_reused".
//
// Two requests a handler can read differently never share a fingerprint: a
// JSON body that names a member twice ({"title":"a","title":"b"}) is hashed
// as its bytes, so it never matches the object with one of the two values;
// a query part that cannot be percent-decoded ("a=%zz") is marked, so it
// never matches the part that decodes to the same text ("a=%25zz").
// Canonicalising streams into the hash: memory grows with the largest
// object of the body, never with a multiple of the whole.
//
// # The life of a key
//
//  1. Claim: the record is inserted as in progress, owned by this invocation
//     (Config.Owner) with a lease that ends at the invocation's deadline plus
//     Config.LeaseMargin, never later than Config.MaxLease from now. A
//     record whose lease or TTL has run out is taken over.
//  2. Run: the handler runs only when this invocation owns the claim.
//  3. Complete: a response with a status for which Storable reports true
//     (2xx, 3xx, 4xx but 408, 409, 425 and 429) is stored with its status,
//     body and content headers (Content-Type, Location and
//     Config.ReplayHeaders) for Config.TTL.
//  4. Release: when the handler returns an error, panics, or returns a
//     status that is not stored, the record is deleted so that the client's
//     retry runs again. The caller gets the handler's own response or error;
//     a panic goes on after the release.
//
// # What the client gets
//
//	first request                       the handler's response
//	retry after completion              the stored status, body (byte for byte) and
//	                                    content headers, plus Idempotent-Replayed: true
//	same key, different request         422 idempotency_key_reused
//	same key while the first still runs 409 idempotency_key_in_use, Retry-After: 1
//	missing key / malformed key         400 idempotency_key_missing / idempotency_key_invalid
//	body marked base64 but not base64   400 validation_failed
//	body over Config.MaxBodyBytes       413 payload_too_large; nothing stored
//	no authenticated user               401 unauthenticated
//	store unreachable or failing        503 idempotency_store_unavailable, Retry-After: 1;
//	                                    the handler does not run
//
// A replay carries only the stored content headers: other headers are not
// repeated unless listed in Config.ReplayHeaders. Cookies follow the same
// rule: with Set-Cookie listed, every cookie of the first response (a v2
// response's "cookies", a v1 response's Set-Cookie in headers or
// multiValueHeaders) is replayed as a cookie of its own, in "cookies" for
// v2 and in multiValueHeaders for v1, never joined into one header line;
// without it, no cookie is replayed.
//
// # When a store reply is lost
//
// A claim can commit in the store and still fail on its way back (a
// timeout, a reset connection). The decorator then claims once more with the
// same owner token, which the store counts as this invocation's own claim,
// and the request goes on in the same invocation. If that fails too, it
// releases the record with the same token (bounded to 2 seconds, even after
// the invocation's context is done) and answers 503: the handler has not
// run, the token fences off any record another invocation holds, and the
// client's retry runs normally instead of getting 409 for the whole lease.
// Only when the store cannot be reached for the release either does the
// record stay in progress until its lease ends.
//
// Complete and Release are retried likewise, with a growing pause, within
// Config.FinishTimeout (5 seconds by default): one dropped connection no
// longer leaves the record in progress until its lease ends.
//
// Every refusal is an application/problem+json body (ProblemContentType)
// with type, title, status, detail and code, the code one of the Code
// constants; no internal error text reaches the client.
//
// When the store fails after the handler ran, the handler's response is
// returned all the same and the failure is logged. A Complete that still
// fails at the end of Config.FinishTimeout leaves the record in progress
// until its lease runs out (retries get 409 meanwhile) rather than
// releasing it, since the work is already done.
//
// # Atomic completion
//
// A handler that writes to the same PostgreSQL database as the store can
// complete its record inside its own transaction, so that its work and the
// key's completion commit together: AtomicCompletion returns the Completion
// to write (with pgstore's CompleteInTx) and tells Wrap not to complete the
// record again. Without it there is a short window after the handler's
// commit in which a crash leaves the work done and the key in progress
// until its lease runs out.
//
// # Answers that must not be stored
//
// A handler that learns from its own data that the key is not the current
// request's to keep (a task row already records the key with another
// request's fingerprint, after the key store was lost) calls DoNotStore
// before answering: its answer is returned but not stored, and the record is
// released, so that the request the key belongs to still gets its answer.
//
// # Observability
//
// Each protected request writes one JSON log line to Config.Logger (message
// "idempotency") with its outcome (see Outcome), key, user, method, path,
// owner, status and the latency of each store call in milliseconds (group
// "store": claim_ms, complete_ms, release_ms, summed over retries, and
// claim_calls, complete_calls, release_calls when a call was repeated), and
// one CloudWatch Embedded Metric Format line to Config.Metrics that counts
// the outcome (and "claimed" when the handler ran, "store_retried" when a
// store call was repeated) in Config.Namespace.
//
// # Functions and SQS batches
//
// Function keys a call by FunctionConfig.Key of its input (an event id, a
// message id: typed Go, no path expressions), optionally scoped
// (FunctionConfig.Scope, per user or tenant) and always by
// FunctionConfig.Name. The first successful call's result is stored as JSON
// and returned to every repeat without running the function. A repeat while
// the first call runs fails with ErrInProgress; a known key with another
// payload (FunctionConfig.Payload) with ErrKeyReused; a store that cannot
// be reached with a *StoreError. Errors and panics release the key.
//
// SQSHandler runs a function once per record of an SQS batch (key: the
// message id, or a part of the body through SQSBodyKey) and answers with
// the records to retry: a failed record alone, never one done before; a
// record in progress in another invocation is reported failed rather than
// run twice; on a FIFO queue the first failure of a message group fails the
// rest of that group in the batch.
//
// AtomicResult is AtomicCompletion for functions: the record is completed
// in the function's own transaction.
//
// # What to import
//
// This package is the whole user API: the shapes, Config, the user
// extractors and the Request view they read (RequestFrom and RequestFromHTTP
// build one, for a test of a UserIDFunc or Fingerprint), the sentinel errors
// and the Code constants of the refusals. A program adds one store package,
// idempotency/pgstore (PostgreSQL, Aurora) or idempotency/redisstore (Redis,
// ElastiCache, Valkey); package dbpool builds the PostgreSQL pool a Lambda
// function needs (RDS Proxy, IAM authentication). Nothing else of the module
// is importable: the sample task API and the repository's tooling live under
// internal/.
//
// # Writing a store
//
// A store is for the few who put records in a database of their own; the
// user API above never needs these names. The Store interface is the seam:
//
//	Store           Claim, Complete, Release and Renew: the four atomic
//	                primitives, each one round trip, whose contracts are on
//	                the interface
//	Claim, ClaimResult    the input and output of Claim
//	Completion      the input of Complete, with the StoredResponse to keep
//	Renewal         the input of Renew: a lease renewed while a run lasts
//	Ref             one record (UserID, Key) and the owner token that claims it
//	Record, Status  a record as kept: in progress (leased) or completed
//	StoredResponse  the response a replay returns, byte for byte
//	ErrLeaseLost    what Complete, Release and Renew return when the token
//	                no longer owns the record
//	StoreError      how every other failure is wrapped (answered with 503)
//
// The rules every store keeps: a claim takes over a record whose lease or
// TTL ran out, judged against the earlier of the caller's clock (Claim.Now)
// and the server's; the same owner claiming its own in-progress record for
// the same RequestHash succeeds (a lost reply); Complete and Release are
// fenced by the owner token and change nothing they do not own. The
// conformance suite in idempotency/storetest checks each rule against a real
// server (storetest.Run), and idempotencytest.RunHTTPBehaviour and its
// siblings run every shape's behaviour table on the store; pgstore and
// redisstore pass both.
package idempotency
