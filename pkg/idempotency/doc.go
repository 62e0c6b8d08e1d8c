// Package idempotency makes work on AWS run once per idempotency key. A client
// sends an Idempotency-Key header with a mutating HTTP request. Every retry of
// it with the same key gets the first response back, and the work does not run
// again. The same engine protects the records of an SQS batch and any typed
// function, keyed by a part of its input. Every shape runs one flow on one
// store. One claim round trip decides. The lease ends at the invocation's
// deadline. An owner token fences completion and release. The record is
// released when the work fails or panics. No work runs while the store cannot
// be reached.
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
// # Wrapping a Lambda handler
//
// Wrap decorates a handler of any of the HTTP payloads above and returns a
// handler of the same type:
//
//	func createTask(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
//		// ... create the task ...
//		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"id":"1"}`}, nil
//	}
//
//	func main() {
//		// pool: a *pgxpool.Pool, such as dbpool.New builds; the key store
//		// exists (pgstore.Migrate).
//		store, err := pgstore.New(pool, nil)
//		if err != nil {
//			log.Fatal(err)
//		}
//		h, err := idempotency.Wrap(createTask, idempotency.Config{
//			Store: store,
//		})
//		if err != nil {
//			log.Fatal(err) // an invalid Config; the message names the field
//		}
//		lambda.Start(h)
//	}
//
// Config.Store is the only required field. Every other field has a documented
// default. Inside the handler, FromContext gives the key, the user and the
// request's fingerprint. By default POST, PATCH and DELETE are protected. The
// user is the "sub" claim of API Gateway's JWT or Cognito authorizer
// (Config.Subject). The key is a UUID version 4 in the Idempotency-Key header.
// A retry of a completed request gets the stored response with
// Idempotent-Replayed: true. The same key with another request gets 422. A
// duplicate while the first still runs gets 409. A store that cannot be reached
// gives 503, and the handler does not run. Every refusal is an
// application/problem+json body with one of the Code constants.
//
// # More
//
// The project's library guide holds the full behaviour contract. It covers the
// protected requests, keys and their sources, fingerprints, subjects and the
// replay. It follows a key's life and lists every answer a client can get. It
// explains the cache, waiting, heartbeats, failures, atomic completion, the log
// line and the metrics.
//
// Related packages: the stores pgstore, redisstore, dynamostore, memstore
// (tests) and storeenv (the one the environment names), with dbpool for
// PostgreSQL. The adapters grpcidem, connectidem, ginidem, echoidem and
// webhook. The observe seam and otelidem (OpenTelemetry). For store
// authors, idemstore and storetest.
package idempotency
