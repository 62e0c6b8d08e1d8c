// Package otelidem reports ichido's protected calls to OpenTelemetry. Each call
// is one span, linked on a replay to the span of the run whose answer it
// replays. Metrics count the calls and their store calls.
//
//	cfg := idempotency.Config{
//		Store:    store,
//		Settings: idempotency.Settings{Observer: otelidem.New()},
//	}
//
// Without options, the global providers are used (otel.SetTracerProvider,
// otel.SetMeterProvider). The package is a module of its own, so that only
// the programs that import it depend on OpenTelemetry.
//
// # Spans
//
// Each protected call is one span of kind internal. A call is an HTTP request
// of Wrap or Middleware, a Function call, or one record of an SQSHandler batch.
// The span is a child of the span in the call's context, such as otelhttp's
// HTTP server span or otellambda's invocation span. It is the parent of what
// the handler does. It is named "idempotency" and the HTTP method ("idempotency
// POST"), the method of a gRPC or Connect call ("idempotency
// shop.v1.Orders/Create"), or FunctionConfig.Name ("idempotency
// record-task-activity"). Its attributes, set when it starts:
//
//	ichido.shape              "http", "function" or "sqs"
//	ichido.store.name         the store's package: "pgstore", "redisstore", ...
//	http.request.method       HTTP shapes; "_OTHER" for an unknown method
//	ichido.function           FunctionConfig.Name (Function and SQSHandler; "rpc" for gRPC and Connect)
//	rpc.method                gRPC and Connect: "package.Service/Method"
//	messaging.system          "aws_sqs" (SQSHandler)
//	messaging.operation.type  "process" (SQSHandler)
//
// and when it ends:
//
//	ichido.outcome            the log line's outcome: "completed", "replayed", ...
//	ichido.claimed            the handler ran
//	ichido.replayed           a stored answer was given
//	ichido.cached             answered from the local cache, with no store call
//	ichido.waited             a duplicate waited for the first run's answer
//	ichido.wait.duration      how long, in seconds (when waited)
//	ichido.heartbeat          the run's lease was renewed while it ran
//	ichido.store.retried      a failed store call was made again
//	http.response.status_code the status answered (HTTP shapes)
//	error.type                the failure's class (below), on failure only
//	ichido.origin.time        a replay's: when the run it replays completed (RFC 3339)
//
// Each store call is an event of the span at the time the call started:
// "ichido.store.claim", "ichido.store.complete", "ichido.store.release",
// "ichido.store.renew" (a heartbeat's renewal), "ichido.store.wait" (a waiting
// duplicate's poll) or "ichido.store.get", with the attribute
// ichido.store.duration (seconds) and, when it failed, error.type. Events cost
// far less than child spans. A store client's own instrumentation (for pgx, the
// AWS SDK or go-redis) makes child spans of this span if wanted. The store
// calls are made in the call's context.
//
// A failed call has the status Error, described by its class only. "transient"
// means the store may succeed when tried again, and "permanent" a deployment to
// fix. The others are "lease_lost" and "handler" (the handler failed or
// panicked). A refusal (409, 422, 400) is the caller's, not a failure.
//
// # Replays point at their origin
//
// The run that completes a record leaves its span's trace and span ids in the
// record, when the span is sampled. A replay's span gets a link to that span,
// from any process that reads the record later. So the answer a client got
// twice leads to the one run that produced it.
//
// # Metrics
//
//	ichido.calls           counter, {call}: protected calls
//	ichido.call.duration   histogram, s: their duration, store calls and handler included
//	ichido.store.duration  histogram, s: the duration of each store call
//
// The calls' attributes are ichido.shape, ichido.store.name,
// ichido.function, http.request.method, ichido.outcome, ichido.claimed,
// ichido.cached, ichido.waited and error.type; the store calls' are
// ichido.store.name, ichido.store.operation ("claim", "complete",
// "release", "renew", "wait", "get") and error.type. The counts of the
// EMF lines (one metric per outcome, "claimed", "cache_hit", "waited",
// "store_permanent") are ichido.calls by ichido.outcome, ichido.claimed,
// ichido.cached, ichido.waited and error.type.
//
// Every attribute value is bounded by the program (its methods, function names
// and stores) or by ichido (outcomes, classes). None is a key, a user, a
// tenant, a path or a body. So they may all become metric dimensions and be
// kept in a tracing backend.
//
// # On AWS Lambda
//
// Set the SDK up at cold start and make each invocation a span with
// otellambda (go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-lambda-go/otellambda),
// whose flusher exports the spans before the invocation returns. To join
// the traces of API Gateway, SQS and X-Ray, use X-Ray's propagator and id
// generator (go.opentelemetry.io/contrib/propagators/aws/xray); otellambda's
// xrayconfig gives the invocation span the parent Lambda sets:
//
//	tp := sdktrace.NewTracerProvider(
//		sdktrace.WithBatcher(exporter), // OTLP to the collector
//		sdktrace.WithIDGenerator(xray.NewIDGenerator()),
//	)
//	otel.SetTracerProvider(tp)
//	otel.SetTextMapPropagator(xray.Propagator{})
//	lambda.Start(otellambda.InstrumentHandler(handler, xrayconfig.WithRecommendedOptions(tp)...))
//
// The exporter sends OTLP to a collector: the AWS Distro for OpenTelemetry
// (ADOT) collector layer, listening on localhost, forwards the spans to
// X-Ray and the metrics to CloudWatch. The idempotency.Settings.Metrics
// EMF lines need no collector; keep them, or turn them off with io.Discard
// once the metrics come through OpenTelemetry.
package otelidem
