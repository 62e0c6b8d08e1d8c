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
// straight through to the handler without touching the store. Methods are
// compared in upper case, by Wrap and Middleware alike: a request whose
// method is "post", "patch" or "Delete" (which a net/http route without a
// method pattern hands to its handler) is protected as POST, PATCH or
// DELETE, and Config.Methods may be written in any case.
//
// A protected request must carry:
//
//   - an authenticated user, taken only from what API Gateway's authorizer
//     filled in (by default the "sub" claim of a JWT or Cognito authorizer,
//     see Config.UserID), of any identity provider (see "Any identity
//     provider" below); otherwise 401 "unauthenticated";
//   - the header Idempotency-Key (Config.KeyHeader; any case; v1
//     multiValueHeaders count too) holding a UUID version 4 (or, with
//     Config.KeyFormat KeyOpaque, any key of 1 to 255 visible ASCII
//     characters), bare or as an RFC 8941 quoted string
//     ("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""), a UUID compared in
//     lower case, an opaque key exactly. A missing header gives 400
//     "idempotency_key_missing" (or, with Config.AllowMissingKey, an
//     unprotected run); anything else that is not one key of the format
//     (empty, another UUID version, too long, two different values, an HTTP
//     API's comma-joined repeat with different values) gives 400
//     "idempotency_key_invalid", whose detail says which of these it is;
//   - a body of at most Config.MaxBodyBytes bytes (6 MiB by default, the most
//     a Lambda invocation carries); otherwise 413 "payload_too_large". Wrap
//     counts the body as API Gateway delivers it, so a binary body counts as
//     its base64 text; Middleware counts the bytes that arrive, so a binary
//     body counts as its bytes, never as the base64 form the Request view
//     holds it in.
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
// # Any identity provider
//
// The stores keep the user as a UUID (ADR 009). The subject Config.UserID
// returns may be anything an identity provider issues: a Cognito sub (a
// UUID, kept as it is in lower case), Auth0's "auth0|6543210fedcba",
// Google's numeric ids, an Okta or Entra id. A subject that is not a UUID
// is mapped by SubjectUUID to the name-based UUID (version 5) of its exact
// bytes in SubjectNamespace: one subject always has the same id, two
// subjects never share one. A program whose own tables key on the user
// calls SubjectUUID on the same subject (the sample task API does).
//
// # Keys: format, header, and keys from the request
//
// Config.KeyFormat chooses the key format: KeyUUIDv4 (the default, ADR 009)
// or KeyOpaque (Stripe's rule: 1 to 255 visible ASCII characters, compared
// exactly; a key holding a comma must be quoted, since an HTTP API joins
// repeated headers with commas). Config.KeyHeader renames the header
// (X-Idempotency-Key is common). Config.Key reads the key from elsewhere
// in the request: a path parameter (PathKey), a body field (BodyKey, typed,
// as Powertools' event_key_jmespath), another header (HeaderKey), or any
// KeyFunc. Whatever its source, the key is scoped by the user and
// Config.KeyPrefix.
//
// The stores keep every key as a lower-case UUID (Ref.Key), so that no
// store depends on the format: a UUID v4 key without a prefix is kept as
// it is; an opaque or prefixed key is kept as the name-based UUID (version
// 5) of prefix + ":" + key in KeyNamespace (RecordKey). HTTPRecordID
// computes both ids of a request's record.
//
// # Optional keys
//
// With Config.AllowMissingKey, a protected request without a key runs the
// handler unprotected (Powertools' and Stripe's default): nothing is
// claimed or stored, the user check still applies, and the request is
// logged and counted with the outcome "unprotected" (OutcomeUnprotected).
// A malformed key is still refused. FunctionConfig.AllowMissingKey does the
// same for a function whose Key is empty. The default stays a 400 (ADR 009).
//
// # Fingerprints of the parts that matter
//
// Config.Fingerprint replaces the fingerprint of the whole request: with
// FingerprintBody (Powertools' payload_validation_jmespath, typed) only the
// method, the path and the parts of the body it picks count. The mismatch
// rules are the same for any fingerprint: a request with a known key and
// the same fingerprint gets the stored answer (or 409 while the first
// runs); with another fingerprint, 422 idempotency_key_reused, on every
// path that finds the record; a request whose fingerprint cannot be
// computed (a body that is not the JSON expected), 400 validation_failed.
//
// # The replay hook
//
// Config.OnReplay (Powertools' responseHook) is called on every replay,
// before the answer is sent, with a Replay: the stored response, the
// record's CreatedAt and ExpiresAt, and the headers of the replay, which
// it may add to, change or remove (an Age, when the key expires). When the
// store's claim does not return the record's times (pgstore's replay is
// the stored response alone), they are read with the store's Admin
// capability: one more read per replay, only when a hook is set.
// FunctionConfig.OnReplay observes a function's repeats the same way.
//
// # Key prefixes
//
// Config.KeyPrefix and FunctionConfig.KeyPrefix (Powertools' key_prefix)
// scope every key, so that several services share one PostgreSQL table or
// one Redis without sharing keys: the same key under two prefixes names two
// records. The default, no prefix, keeps ADR 009's keys unchanged.
//
// # Unit tests
//
// A handler's unit test needs no server: idempotency/memstore's New is a
// Store in memory that keeps the whole contract (and passes storetest), so
// the test sees replays, 409s and releases as production would, and can
// list the records left (Admin). Only a test of the handler alone, without
// the decorator, calls the unwrapped function, with NewContext standing in
// for the Info a wrapped run gets.
//
// # Operations
//
// The optional Admin capability (Get, List, Delete; pgstore, redisstore
// and memstore implement it) lets an operator find a record by user and
// key, list what is in progress (all users, or one), and delete a record.
// The ids a store keeps are derived for opaque and prefixed keys, for
// subjects that are not UUIDs, and always for Function and SQSHandler
// records: HTTPRecordID and FunctionRecordID compute them, and cmd/keystore
// (get, list, delete) calls them.
//
// # A store from the environment
//
// idempotency/storeenv's Open builds the store the environment names
// (IDEMPOTENCY_STORE=postgres, redis or dynamodb; DATABASE_URL or the
// dbpool variables, REDIS_URL, IDEMPOTENCY_TABLE), so that a program
// switches stores by configuration alone.
//
// # The life of a key
//
//  1. Claim: the record is inserted as in progress, owned by this invocation
//     (Config.Owner) with a lease that ends at the invocation's deadline plus
//     Config.LeaseMargin, never later than Config.MaxLease from now; a run
//     without a deadline (net/http) gets a short lease renewed while it runs
//     instead (Config.Heartbeat). A record whose lease or TTL has run out is
//     taken over.
//  2. Run: the handler runs only when this invocation owns the claim.
//  3. Complete: a response with a status for which Storable reports true
//     (2xx, 3xx, 4xx but 408, 409, 425 and 429) is stored with its status,
//     body and content headers (Content-Type, Content-Encoding, Location and
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
//	                                    (with Config.WaitForResult: its answer, once ready)
//	missing key / malformed key         400 idempotency_key_missing / idempotency_key_invalid
//	missing key, Config.AllowMissingKey the handler's response, unprotected: nothing stored
//	body marked base64 but not base64   400 validation_failed
//	body over Config.MaxBodyBytes       413 payload_too_large; nothing stored
//	no authenticated user               401 unauthenticated
//	store unreachable or failing        503 idempotency_store_unavailable, Retry-After: 1;
//	                                    the handler does not run
//	store refusing for good             500 idempotency_store_misconfigured, no Retry-After;
//	(a missing grant, table, password)  the handler does not run
//	retry of a response too large to    422 idempotency_response_not_kept; the handler
//	keep (see below)                    does not run again
//
// A replay carries only the stored content headers: by default
// Content-Type, Content-Encoding (so that a body the handler compressed
// itself replays as the same compressed bytes, still marked so) and
// Location; other headers are not repeated unless listed in
// Config.ReplayHeaders. Cookies follow the same rule: with Set-Cookie
// listed, every cookie of the first response (a v2 response's "cookies", a
// v1 response's Set-Cookie in headers or multiValueHeaders) is replayed as
// a cookie of its own, in "cookies" for v2 and in multiValueHeaders for v1,
// never joined into one header line, and the replay sends exactly the
// first response's cookies, byte for byte: the cookies are kept as a list,
// so a cookie whose value holds a line break stays one cookie and cannot
// become two ("theme=dark" and an injected "admin=1"); net/http writes
// such a break as a space, on the first response and on the replay alike.
// Without Set-Cookie listed, no cookie is replayed.
//
// # Past the round trip: cache, wait, heartbeat
//
// Three options go past what one store round trip per request can do:
//
//   - Config.LocalCache (off by default) keeps completed records in memory,
//     a bounded LRU by count and by bytes: a repeat of a request that this
//     execution environment completed (or replayed from a store that
//     reports expiries, such as redisstore) is answered with no round trip,
//     until the record's expiry by the earlier of Config.Clock and the
//     process's monotonic clock. Only completed records are cached, so
//     fencing is untouched. The log line says "cached": true and the
//     metric cache_hit counts it.
//   - Config.WaitForResult (off by default) lets a duplicate that finds the
//     key in progress for the same request poll the store (one Claim a
//     poll, 20ms growing to 500ms between them; no LISTEN, nothing that pins
//     a proxy connection) up to that long, never past its own deadline, and
//     replay the first request's answer instead of 409, ErrInProgress or a
//     failed SQS record. The polls appear as wait_ms and wait_calls in the
//     log line's store group, and the metric waited counts the duplicate.
//   - Config.Heartbeat (on by default, 30 seconds) is the lease of a run
//     without a deadline: a net/http request, or a Function called outside
//     Lambda. The run claims one Heartbeat and renews it every third of it
//     (Store.Renew, fenced by its owner token) while it lasts, so a server
//     that crashes mid-request frees its keys within one Heartbeat instead
//     of MaxLease. Lambda invocations keep their deadline's lease, which
//     needs no writes, unless Config.HeartbeatLongRuns asks for renewal of
//     long ones too. The log line says "heartbeat": true, with renew_ms and
//     renew_calls.
//
// Function and SQSHandler take the same three fields in FunctionConfig.
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
// # Permanent store errors
//
// A store tells a failure that no retry can cure (idemstore.Error.Permanent:
// missing privileges, a missing table, function or schema, refused
// credentials, a value under its keys that is not a record) from a
// transient one (the network, a timeout, a failover). A permanent claim
// failure is not retried or recovered from: the request is refused at once
// with 500 idempotency_store_misconfigured and no Retry-After, since a
// client's retry cannot succeed until the deployment is fixed, and the log
// line carries "permanent": true (metric "store_permanent"). Like every
// store failure it fails closed: the handler does not run. A Complete or
// Release that fails permanently is not retried either, and a heartbeat
// renewal (Config.Heartbeat) that fails permanently cancels the run's
// context, as a lost lease does, rather than let the lease lapse under a
// run that goes on. CheckStore runs the
// store's three calls on a probe record at start-up, so that such a
// misconfiguration shows before the first request.
//
// # When a result cannot be kept
//
// Every store has a largest record (pgstore: a JSONB value, 255 MiB by
// default; redisstore: a Redis string, 511 MiB by default; dynamostore: a
// DynamoDB item, 400 KB; each configurable by Options.MaxRecordBytes,
// dynamostore's only below 400 KB). A response larger than that is returned
// to the first client as the handler made it, but it cannot be stored for
// replay: the store refuses it before sending it (ErrTooLarge),
// and the record is completed with a marker instead, so that the key stays
// completed and the handler never runs again for it. A retry gets 422
// idempotency_response_not_kept; the log line of the first request has
// outcome "not_kept". A Function whose result does not encode as JSON (a
// NaN) is treated the same way: the caller gets the result, a repeat fails
// with ErrResultNotKept, and SQSHandler skips such a record as done.
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
// key's completion commit together: pgstore's CompleteRunInTx takes the
// run's completion over and writes it in the handler's transaction, in one
// call (AtomicCompletion and AtomicResult hand out the Completion for a
// store's CompleteInTx, the same in two). Without it there is a short window
// after the handler's commit in which a crash leaves the work done and the
// key in progress until its lease runs out. Only a Store that can write in
// the caller's transaction (TxCompleter: pgstore) hands a completion out;
// on any other (Redis) the calls report false and the engine completes the
// record as usual, so a handler cannot take the completion over and leave
// the key in progress. A handler that answers with another response than
// the one it completed (another status, body or kept header; for
// Middleware, other bytes written) has its answer refused with 500
// idempotency_response_mismatch, and the retry replays what was completed:
// a replay is always what a client could have got. A handler whose
// transaction rolled back before the completion was written gives it back
// with AbandonCompletion; the engine then completes the record with
// whatever the handler answers. pgstore's CompleteInBatch writes a
// completion in the handler's own pgx.Batch: its writes and the key's
// completion in one round trip.
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
// be reached with a *idemstore.Error. Errors and panics release the key.
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
// build one, for a test of a UserIDFunc or Fingerprint), the key sources
// and fingerprints, the sentinel errors and the Code constants of the
// refusals. A program adds one store package, idempotency/pgstore
// (PostgreSQL, Aurora), idempotency/redisstore (Redis, ElastiCache,
// Valkey) or idempotency/dynamostore (DynamoDB), or idempotency/storeenv to
// pick pgstore or redisstore by configuration, and idempotency/memstore in
// its unit tests; package dbpool builds the PostgreSQL pool a Lambda
// function needs (RDS Proxy, IAM authentication). Nothing else of the module
// is importable: the sample task API and the repository's tooling live under
// internal/.
//
// # Writing a store
//
// Package idemstore is the contract a store implements, and package
// storetest the suite that proves one.
package idempotency
