package tasks

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/pkg/idempotency"
)

// Handler is the shape of every handler of the API: an API Gateway HTTP API
// (payload format 2.0) Lambda handler.
type Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds a request body. A task's largest valid body
	// is well under 16 KiB even with every character escaped.
	DefaultMaxBodyBytes = 64 << 10
	// DefaultRetryAfter is the Retry-After of a 503.
	DefaultRetryAfter = 2 * time.Second
)

// Options configures an API. A nil *Options means all defaults.
type Options struct {
	// Logger receives every failure that a client is not shown (database
	// errors, panics). Defaults to slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body (after base64 decoding); a larger
	// one is answered with 413. Defaults to 64 KiB (DefaultMaxBodyBytes).
	MaxBodyBytes int
	// RetryAfter is sent with a 503 when the database fails, rounded up to
	// whole seconds. Defaults to 2s (DefaultRetryAfter).
	RetryAfter time.Duration
	// Keys is the idempotency key store (on the same database) of the
	// decorator that protects Create. With it, and a Service on a pool,
	// Create completes the key in the batch that inserts the task
	// (pgstore's CompleteRunInBatch): one round trip and one commit fewer,
	// and no moment at which the task exists but its key is in progress.
	// The task's id and times are then made by the function rather than the
	// database. Defaults to nil: the decorator completes the key.
	Keys KeyCompleter
}

// API holds the HTTP handlers of the task API.
//
// Failures are answered, never returned: a handler's Go error is always nil,
// since API Gateway turns a Go error into a bare 502 that is not problem+json.
// A client mistake is a 4xx problem; a database failure is 503
// service_unavailable with Retry-After; anything else (a bug, a recovered
// panic) is 500 internal_error. Both 5xx make the idempotency decorator
// release the key, so the client's retry runs again. The real error is
// logged; the client sees only a fixed sentence.
type API struct {
	svc        *Service
	keys       KeyCompleter
	log        *slog.Logger
	maxBody    int
	retryAfter string
}

// NewAPI returns the handlers over svc.
func NewAPI(svc *Service, opts *Options) *API {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	secs := int((o.RetryAfter + time.Second - 1) / time.Second)
	return &API{svc: svc, keys: o.Keys, log: o.Logger, maxBody: o.MaxBodyBytes, retryAfter: strconv.Itoa(secs)}
}

// errBodyTooLarge is answered with 413.
var errBodyTooLarge = errors.New("tasks: request body too large")

// errUnauthenticated is answered with 401. API Gateway's JWT authorizer
// normally refuses such a request before the function runs.
var errUnauthenticated = errors.New("tasks: no authenticated user")

// Create handles POST /tasks: 201 with the task and its Location. Behind
// idempotency.Wrap, the request's key and fingerprint are recorded on the
// row; a retry that finds its own row answers it again (with
// Idempotent-Replayed: true) instead of creating another task.
func (a *API) Create(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, req, "create", func(ctx context.Context, user string) (events.APIGatewayV2HTTPResponse, error) {
		body, err := a.body(req)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		in, err := ParseNewTask(body)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		var ref *IdempotencyRef
		if info, ok := idempotency.FromContext(ctx); ok {
			ref = &IdempotencyRef{Key: info.Key, Fingerprint: info.Fingerprint}
		}
		if db, ok := a.svc.repo.db.(batcher); ok && a.keys != nil && ref != nil {
			if resp, done, err := a.createAtomic(ctx, db, user, in, ref); done {
				return resp, err
			}
		}
		t, replayed, err := a.svc.Create(ctx, user, in, ref)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		return createdResponse(t, replayed), nil
	})
}

// listBody is the JSON of a page.
type listBody struct {
	Tasks []Task  `json:"tasks"`
	Next  *string `json:"next"`
}

// List handles GET /tasks: 200 with the caller's tasks, newest first, up to
// ?limit= (default 50, at most 100), and the cursor of the next page in
// "next" (null on the last page), to send back as ?cursor=. An empty cursor
// means the first page.
func (a *API) List(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, req, "list", func(ctx context.Context, user string) (events.APIGatewayV2HTTPResponse, error) {
		var errs fieldErrors
		raw, present := req.QueryStringParameters["limit"]
		limit, err := ParseLimit(raw, present)
		var verr *ValidationError
		if errors.As(err, &verr) {
			errs = append(errs, verr.Fields...)
		}
		var after *Position
		if c := req.QueryStringParameters["cursor"]; c != "" {
			p, err := DecodeCursor(user, c)
			if errors.As(err, &verr) {
				errs = append(errs, verr.Fields...)
			}
			after = &p
		}
		if err := errs.err(); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		page, err := a.svc.List(ctx, user, after, limit)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		out := listBody{Tasks: page.Tasks}
		if page.Next != nil {
			c := EncodeCursor(user, *page.Next)
			out.Next = &c
		}
		return jsonResponse(http.StatusOK, out), nil
	})
}

// Get handles GET /tasks/{id}: 200 with the task; 404 when the id is not a
// UUID, is unknown or is another user's.
func (a *API) Get(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, req, "get", func(ctx context.Context, user string) (events.APIGatewayV2HTTPResponse, error) {
		id, ok := ParseID(req.PathParameters["id"])
		if !ok {
			return events.APIGatewayV2HTTPResponse{}, ErrNotFound
		}
		t, err := a.svc.Get(ctx, user, id)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		return jsonResponse(http.StatusOK, t), nil
	})
}

// Update handles PATCH /tasks/{id}: a partial update, 200 with the task.
// Absent fields are unchanged; "description" and "due_date" are cleared by
// null. The id is checked before the body, so an unknown task is a 404
// whatever the body.
func (a *API) Update(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, req, "update", func(ctx context.Context, user string) (events.APIGatewayV2HTTPResponse, error) {
		id, ok := ParseID(req.PathParameters["id"])
		if !ok {
			return events.APIGatewayV2HTTPResponse{}, ErrNotFound
		}
		body, err := a.body(req)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		p, err := ParsePatch(body)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		t, err := a.svc.Update(ctx, user, id, p)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		return jsonResponse(http.StatusOK, t), nil
	})
}

// Delete handles DELETE /tasks/{id}: 204 with an empty body. Behind
// idempotency.Wrap, the deletion records the request's key and fingerprint,
// so that a retry answers 204 again (with Idempotent-Replayed: true) even
// when the key store has forgotten the key, instead of 404.
func (a *API) Delete(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return a.serve(ctx, req, "delete", func(ctx context.Context, user string) (events.APIGatewayV2HTTPResponse, error) {
		id, ok := ParseID(req.PathParameters["id"])
		if !ok {
			return events.APIGatewayV2HTTPResponse{}, ErrNotFound
		}
		var ref *IdempotencyRef
		if info, ok := idempotency.FromContext(ctx); ok {
			ref = &IdempotencyRef{Key: info.Key, Fingerprint: info.Fingerprint}
		}
		replayed, err := a.svc.Delete(ctx, user, id, ref)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		resp := events.APIGatewayV2HTTPResponse{StatusCode: http.StatusNoContent, Headers: map[string]string{}}
		if replayed {
			resp.Headers["Idempotent-Replayed"] = "true"
		}
		return resp, nil
	})
}

// serve runs fn for the authenticated user and turns its error, or a panic,
// into a problem response. It never returns a Go error.
func (a *API) serve(ctx context.Context, req events.APIGatewayV2HTTPRequest, op string,
	fn func(context.Context, string) (events.APIGatewayV2HTTPResponse, error),
) (resp events.APIGatewayV2HTTPResponse, _ error) {
	defer func() {
		if v := recover(); v != nil {
			a.log.ErrorContext(ctx, "tasks: handler panicked",
				"op", op, "request_id", req.RequestContext.RequestID,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			resp = problemResponse(problem.New(http.StatusInternalServerError, problem.CodeInternal,
				"The request failed unexpectedly."))
		}
	}()
	user, ok := userID(req)
	if !ok {
		return a.fail(ctx, req, op, errUnauthenticated), nil
	}
	resp, err := fn(ctx, user)
	if err != nil {
		return a.fail(ctx, req, op, err), nil
	}
	return resp, nil
}

// fail is the one place where an error becomes a response.
func (a *API) fail(ctx context.Context, req events.APIGatewayV2HTTPRequest, op string, err error) events.APIGatewayV2HTTPResponse {
	var (
		verr *ValidationError
		dbe  *DBError
	)
	switch {
	case errors.As(err, &verr):
		d := problem.New(http.StatusBadRequest, problem.CodeValidation, "The request is invalid; see errors for each field.")
		d.Errors = verr.Fields
		return problemResponse(d)
	case errors.Is(err, errUnauthenticated):
		return problemResponse(problem.New(http.StatusUnauthorized, idempotency.CodeUnauthenticated,
			"The request carries no authenticated user."))
	case errors.Is(err, ErrNotFound):
		return problemResponse(problem.New(http.StatusNotFound, problem.CodeNotFound, "No task with this id."))
	case errors.Is(err, ErrKeyReused):
		// The key belongs to the request that created the task: this refusal
		// must not become the key's stored answer, or that request's own
		// retry would be refused too.
		idempotency.DoNotStore(ctx)
		return problemResponse(problem.New(http.StatusUnprocessableEntity, idempotency.CodeKeyReused,
			"This Idempotency-Key was already used for a different request."))
	case errors.Is(err, errBodyTooLarge):
		return problemResponse(problem.New(http.StatusRequestEntityTooLarge, idempotency.CodePayloadTooLarge,
			"The request body is larger than "+strconv.Itoa(a.maxBody)+" bytes."))
	case errors.As(err, &dbe):
		a.log.ErrorContext(ctx, "tasks: database failure", "op", op,
			"request_id", req.RequestContext.RequestID, "error", err.Error())
		resp := problemResponse(problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable,
			"The service is temporarily unavailable; retry later."))
		resp.Headers["Retry-After"] = a.retryAfter
		return resp
	default:
		a.log.ErrorContext(ctx, "tasks: unexpected failure", "op", op,
			"request_id", req.RequestContext.RequestID, "error", err.Error())
		return problemResponse(problem.New(http.StatusInternalServerError, problem.CodeInternal,
			"The request failed unexpectedly."))
	}
}

// body returns the request body, base64-decoded when API Gateway encoded it.
func (a *API) body(req events.APIGatewayV2HTTPRequest) ([]byte, error) {
	if !req.IsBase64Encoded {
		if len(req.Body) > a.maxBody {
			return nil, errBodyTooLarge
		}
		return []byte(req.Body), nil
	}
	if base64.StdEncoding.DecodedLen(len(req.Body)) > a.maxBody+2 {
		return nil, errBodyTooLarge
	}
	b, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil {
		return nil, invalid(bodyField, "is not valid base64 although marked isBase64Encoded")
	}
	if len(b) > a.maxBody {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// userID returns the caller: the user id of the JWT authorizer's sub claim,
// as idempotency.SubjectUUID maps it (a Cognito sub is its own id; another
// identity provider's subject, such as auth0|…, gets a name-based UUID), so
// that the tasks table, which stores the user as a UUID, and the key store
// agree on who the user is. It is never read from a header or the body.
func userID(req events.APIGatewayV2HTTPRequest) (string, bool) {
	az := req.RequestContext.Authorizer
	if az == nil || az.JWT == nil {
		return "", false
	}
	id := idempotency.SubjectUUID(az.JWT.Claims["sub"])
	return id, id != ""
}

func jsonResponse(status int, v any) events.APIGatewayV2HTTPResponse {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // cannot happen: tasks are plain data
		panic(fmt.Sprintf("tasks: encoding a response: %v", err))
	}
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       strings.TrimSuffix(buf.String(), "\n"),
	}
}

func problemResponse(d problem.Details) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{
		StatusCode: d.Status,
		Headers:    map[string]string{"Content-Type": problem.ContentType},
		Body:       string(d.JSON()),
	}
}
