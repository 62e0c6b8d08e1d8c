package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/pkg/idempotency"
)

// openapiFile is the task API's contract, relative to the repository root.
const openapiFile = "docs/openapi.yaml"

// repoPath is a path of the repository seen from this package.
func repoPath(rel string) string { return filepath.Join("..", "..", filepath.FromSlash(rel)) }

// contract is the OpenAPI document, parsed and ready to validate against.
type contract struct {
	model     *v3.Document
	validator validator.Validator
	schemas   schema_validation.SchemaValidator
}

func loadContract(t *testing.T) *contract {
	t.Helper()
	b, err := os.ReadFile(repoPath(openapiFile))
	require.NoError(t, err)
	doc, err := libopenapi.NewDocument(b)
	require.NoError(t, err, "%s does not parse", openapiFile)
	require.True(t, strings.HasPrefix(doc.GetVersion(), "3.1"), "%s must be OpenAPI 3.1, is %s", openapiFile, doc.GetVersion())
	m, err := doc.BuildV3Model()
	require.NoError(t, err, "%s: building the model", openapiFile)
	opts := []config.Option{
		config.WithFormatAssertions(),
		// Strict: a response property or header the document does not
		// declare is an error, so the document cannot fall behind silently.
		config.WithStrictMode(),
		// Headers that every HTTP exchange carries, or that the transport
		// adds; they are not part of the API.
		config.WithStrictIgnoredHeadersExtra("Date", "Content-Length", "Connection", "User-Agent", "Accept-Encoding"),
	}
	v, errs := validator.NewValidator(doc, opts...)
	require.Empty(t, errs, "%s: building the validator", openapiFile)
	return &contract{model: &m.Model, validator: v, schemas: schema_validation.NewSchemaValidator(opts...)}
}

// operation returns the document's operation for a route key such as
// "PATCH /tasks/{id}".
func (c *contract) operation(route string) *v3.Operation {
	method, path, _ := strings.Cut(route, " ")
	item, ok := c.model.Paths.PathItems.Get(path)
	if !ok {
		return nil
	}
	op, _ := item.GetOperations().Get(strings.ToLower(method))
	return op
}

// routes returns the route key of every operation in the document.
func (c *contract) routes() []string {
	var out []string
	for path, item := range c.model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// answers lists what the document says each operation can answer, as
// "ROUTE STATUS MEDIA" ("-" for a response without a body).
func (c *contract) answers() []string {
	var out []string
	for _, route := range c.routes() {
		op := c.operation(route)
		for status, resp := range op.Responses.Codes.FromOldest() {
			if resp.Content == nil || resp.Content.Len() == 0 {
				out = append(out, route+" "+status+" -")
				continue
			}
			for media := range resp.Content.FromOldest() {
				out = append(out, route+" "+status+" "+media)
			}
		}
	}
	return out
}

func (c *contract) schema(name string) *base.Schema {
	proxy, ok := c.model.Components.Schemas.Get(name)
	if !ok {
		return nil
	}
	return proxy.Schema()
}

// problemCodes returns the Code* constants of package problem (the task
// API's) and package idempotency (the decorator's), read from their source
// so that a code added there is seen here without a list to keep.
func problemCodes(t *testing.T) map[string]string {
	t.Helper()
	codes := map[string]string{}
	for pkg, dir := range map[string]string{"problem": repoPath("internal/problem"), "idempotency": repoPath("pkg/idempotency")} {
		readCodes(t, pkg, dir, codes)
	}
	require.Contains(t, codes, idempotency.CodeKeyReused, "the decorator's problem codes were read")
	require.Contains(t, codes, problem.CodeNotFound, "the task API's problem codes were read")
	return codes
}

func readCodes(t *testing.T, pkg, dir string, codes map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						codes[v] = pkg + "." + name.Name
					}
				}
			}
		}
	}
}

// enumOf returns the string values of a schema's enum or const.
func enumOf(s *base.Schema) []string {
	var out []string
	if s == nil {
		return nil
	}
	for _, n := range s.Enum {
		out = append(out, n.Value)
	}
	if s.Const != nil {
		out = append(out, s.Const.Value)
	}
	return out
}

// TestOpenAPIDocument checks the document itself: valid OpenAPI 3.1, one
// operation per route of template.yaml and no other, and every stable
// problem code of package problem in the Problem schema.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	c := loadContract(t)

	ok, errs := c.validator.ValidateDocument()
	require.True(t, ok, "%s is not a valid OpenAPI document:\n%s", openapiFile, formatErrors(errs))

	tpl, err := samtemplate.Load(repoPath("template.yaml"))
	require.NoError(t, err)
	var fromTemplate []string
	for _, r := range templateRoutes(tpl) {
		key := r.Key()
		fromTemplate = append(fromTemplate, key)
		if c.operation(key) == nil {
			t.Errorf("template.yaml routes %s to %s, but %s has no operation for it: add %q with method %s under paths",
				key, r.Function, openapiFile, r.Path, strings.ToLower(r.Method))
		}
	}
	require.NotEmpty(t, fromTemplate)
	for _, route := range c.routes() {
		if !slices.Contains(fromTemplate, route) {
			t.Errorf("%s documents %s, which template.yaml has no route for", openapiFile, route)
		}
		if c.operation(route).Security != nil {
			t.Errorf("%s: %s overrides the security requirement, but every route of the HTTP API has the JWT authorizer", openapiFile, route)
		}
	}
	require.Len(t, c.model.Security, 1, "%s: one global security requirement, the JWT authorizer", openapiFile)
	_, ok = c.model.Security[0].Requirements.Get("bearerJWT")
	require.True(t, ok, "%s: the global security requirement is bearerJWT", openapiFile)

	problemSchema := c.schema("Problem")
	require.NotNil(t, problemSchema, "%s: components.schemas.Problem", openapiFile)
	codeProxy, ok := problemSchema.Properties.Get("code")
	require.True(t, ok, "%s: Problem has a code property", openapiFile)
	documented := enumOf(codeProxy.Schema())
	codes := problemCodes(t)
	for code, name := range codes {
		if !slices.Contains(documented, code) {
			t.Errorf("%s: problem code %q (%s) is missing from the enum of components.schemas.Problem.properties.code; "+
				"add it there and to the responses that can carry it", openapiFile, code, name)
		}
	}
	for _, code := range documented {
		if _, ok := codes[code]; !ok {
			t.Errorf("%s: the Problem schema lists code %q, which package problem does not define", openapiFile, code)
		}
	}

	// Each problem response narrows the code; every code it names must be
	// a real one.
	for _, route := range c.routes() {
		for status, resp := range c.operation(route).Responses.Codes.FromOldest() {
			if resp.Content == nil {
				continue
			}
			mt, ok := resp.Content.Get(problem.ContentType)
			if !ok {
				continue
			}
			narrowed := 0
			for _, part := range mt.Schema.Schema().AllOf {
				if p, ok := part.Schema().Properties.Get("code"); ok {
					for _, code := range enumOf(p.Schema()) {
						narrowed++
						require.Contains(t, codes, code, "%s: %s %s names problem code %q, which package problem does not define", openapiFile, route, status, code)
					}
				}
			}
			require.Positive(t, narrowed, "%s: %s %s must list the problem codes it can carry", openapiFile, route, status)
		}
	}
}

// requestCheck says what the validator must think of a request.
type requestCheck int

const (
	// requestAny: the document cannot tell (an expired token, a user id
	// that is not a UUID, a key already used).
	requestAny requestCheck = iota
	// requestValid: the request follows the document.
	requestValid
	// requestInvalid: the document forbids the request, as the API does.
	requestInvalid
)

// call is one request to the running API and the answer it must get.
type call struct {
	// route is the template's route key, e.g. "PATCH /tasks/{id}".
	route string
	// path is the concrete path and query; the route's path when empty.
	path string
	// token is the bearer token; none when empty.
	token string
	// key is the Idempotency-Key; none when empty.
	key string
	// body is sent as application/json.
	body string
	// status is the status the API must answer.
	status int
	// code is the problem code expected; "" for a success.
	code string
	// gateway: API Gateway's own {"message": …} answer is expected.
	gateway bool
	// replayed: Idempotent-Replayed: true is expected.
	replayed bool
	// request is what the validator must think of the request.
	request requestCheck
}

// exchange is one answer of the API.
type exchange struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

// exchanger sends calls to the API and validates each exchange.
type exchanger struct {
	t         *testing.T
	c         *contract
	base      string
	seen      map[string]bool // "ROUTE STATUS MEDIA"
	succeeded map[string]bool // route keys answered with a 2xx
}

func (x *exchanger) newRequest(cl call) *http.Request {
	x.t.Helper()
	method, tmpl, _ := strings.Cut(cl.route, " ")
	path := cl.path
	if path == "" {
		path = tmpl
	}
	var body io.Reader
	if cl.body != "" {
		body = strings.NewReader(cl.body)
	}
	req, err := http.NewRequest(method, x.base+path, body)
	require.NoError(x.t, err)
	if cl.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	return req
}

// send makes the call, checks the answer it must get, and validates the
// exchange against the document.
func (x *exchanger) send(cl call) exchange {
	x.t.Helper()
	resp, err := http.DefaultClient.Do(x.newRequest(cl))
	require.NoError(x.t, err, cl.route)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(x.t, err)
	a := exchange{status: resp.StatusCode, header: resp.Header, body: b}
	_ = json.Unmarshal(b, &a.json)

	what := fmt.Sprintf("%s %s", cl.route, cl.path)
	require.Equal(x.t, cl.status, a.status, "%s: %s", what, b)
	media, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	switch {
	case cl.gateway:
		require.Equal(x.t, "application/json", media, "%s: the gateway's own answer: %s", what, b)
		require.NotEmpty(x.t, a.json["message"], "%s: %s", what, b)
	case cl.code != "":
		require.Equal(x.t, problem.ContentType, media, "%s: %s", what, b)
		require.Equal(x.t, cl.code, a.json["code"], "%s: %s", what, b)
	}
	if cl.replayed {
		require.Equal(x.t, "true", resp.Header.Get("Idempotent-Replayed"), what)
	} else {
		require.Empty(x.t, resp.Header.Get("Idempotent-Replayed"), what)
	}
	if len(b) == 0 {
		media = "-"
	}

	x.documented(cl, a, media)
	x.validate(cl, a)
	x.seen[cl.route+" "+strconv.Itoa(a.status)+" "+media] = true
	if a.status < 300 {
		x.succeeded[cl.route] = true
	}
	return a
}

// documented fails, naming what to add, when the document does not
// describe the answer's route, status or media type.
func (x *exchanger) documented(cl call, a exchange, media string) {
	x.t.Helper()
	op := x.c.operation(cl.route)
	require.NotNil(x.t, op, "%s has no operation for %s, which the API serves: add it", openapiFile, cl.route)
	status := strconv.Itoa(a.status)
	resp, ok := op.Responses.Codes.Get(status)
	require.True(x.t, ok, "%s does not document status %s for %s, which the API answered (%s): add it to the operation's responses",
		openapiFile, status, cl.route, a.body)
	if media == "-" {
		require.True(x.t, resp.Content == nil || resp.Content.Len() == 0,
			"%s: %s %s has content, but the API answered no body", openapiFile, cl.route, status)
		return
	}
	require.NotNil(x.t, resp.Content, "%s: %s %s documents no content, but the API answered %s: %s", openapiFile, cl.route, status, media, a.body)
	_, ok = resp.Content.Get(media)
	require.True(x.t, ok, "%s: %s %s does not document the media type %s, which the API answered: %s", openapiFile, cl.route, status, media, a.body)
}

// validate runs the library's validation of the response and, where the
// call says, of the request.
func (x *exchanger) validate(cl call, a exchange) {
	x.t.Helper()
	req := x.newRequest(cl)
	resp := &http.Response{
		StatusCode: a.status,
		Header:     a.header,
		Body:       io.NopCloser(bytes.NewReader(a.body)),
		Request:    req,
	}
	ok, errs := x.c.validator.ValidateHttpResponse(req, resp)
	require.True(x.t, ok, "%s answered %d, which does not match %s:\n%s\nbody: %s", cl.route, a.status, openapiFile, formatErrors(errs), a.body)

	switch cl.request {
	case requestAny:
		// The document cannot tell: only the answer is checked.
	case requestValid:
		ok, errs := x.c.validator.ValidateHttpRequestSync(x.newRequest(cl))
		require.True(x.t, ok, "%s: the API accepted the request, but %s forbids it:\n%s", cl.route, openapiFile, formatErrors(errs))
	case requestInvalid:
		ok, _ := x.c.validator.ValidateHttpRequestSync(x.newRequest(cl))
		require.False(x.t, ok, "%s %s: the API refused the request with %d %s, but %s allows it", cl.route, cl.path, a.status, cl.code, openapiFile)
	}
}

func formatErrors(errs []*vErrors.ValidationError) string {
	var sb strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&sb, "  - %s: %s", e.Message, e.Reason)
		if e.SpecLine > 0 {
			fmt.Fprintf(&sb, " (%s line %d)", openapiFile, e.SpecLine)
		}
		sb.WriteByte('\n')
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&sb, "      %s at %s\n", s.Reason, s.KeywordLocation)
		}
	}
	return sb.String()
}

// TestOpenAPIResponses drives the local API (the gateway and the real
// functions in process, on a real PostgreSQL) through every route and the
// answers the document lists, and validates each real response, and most
// requests, against the document.
func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	// Requests held on a lock below occupy connections; the default pool
	// of 2 (one Lambda environment's), which the in-process functions
	// share, would starve the requests sent meanwhile.
	srv := startServer(t, "DB_MAX_CONNS=8")
	x := &exchanger{t: t, c: c, base: srv.base, seen: map[string]bool{}, succeeded: map[string]bool{}}
	ctx := context.Background()

	alice := mustToken(t, localapi.TokenOptions{Subject: uuid.NewString()})
	bob := mustToken(t, localapi.TokenOptions{Subject: uuid.NewString()})
	auth0 := mustToken(t, localapi.TokenOptions{Subject: "auth0|" + uuid.NewString()})
	// A token the gateway accepts but that names no subject: the functions
	// answer it unauthenticated.
	noSub := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"username":"alice","exp":`+strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)+`}`)) + ".c2ln"
	expired := mustToken(t, localapi.TokenOptions{Subject: uuid.NewString(), TTL: time.Hour, Now: time.Now().Add(-2 * time.Hour)})
	const (
		post   = "POST /tasks"
		list   = "GET /tasks"
		get    = "GET /tasks/{id}"
		patch  = "PATCH /tasks/{id}"
		remove = "DELETE /tasks/{id}"
	)
	mutations := []string{post, patch, remove}
	everyRoute := []string{post, list, get, patch, remove}
	unknown := "/tasks/" + uuid.NewString()
	pathOf := func(route string) string {
		if strings.HasSuffix(route, "{id}") {
			return unknown
		}
		return ""
	}
	keyFor := func(route string) string {
		if slices.Contains(mutations, route) {
			return uuid.NewString()
		}
		return ""
	}
	bodyOf := func(route string) string {
		switch route {
		case post:
			return `{"title":"x"}`
		case patch:
			return `{"status":"done"}`
		}
		return ""
	}

	// Create, replay, list, get, update, delete.
	key := uuid.NewString()
	first := x.send(call{route: post, token: alice, key: key, body: `{"title":"Write the deploy guide","description":"for newcomers","due_date":"2026-12-31"}`, status: 201, request: requestValid})
	id, _ := first.json["id"].(string)
	require.NotEmpty(t, id)
	x.send(call{route: post, token: alice, key: key, body: `{"title":"Write the deploy guide","description":"for newcomers","due_date":"2026-12-31"}`, status: 201, replayed: true, request: requestValid})
	x.send(call{route: post, token: alice, key: uuid.NewString(), body: `{"title":"Second","status":"in_progress"}`, status: 201, request: requestValid})
	x.send(call{route: post, token: alice, key: `"` + strings.ToUpper(uuid.NewString()) + `"`, body: `{"title":"Quoted key"}`, status: 201, request: requestValid})
	page := x.send(call{route: list, path: "/tasks?limit=2", token: alice, status: 200, request: requestValid})
	next, _ := page.json["next"].(string)
	require.NotEmpty(t, next, "three tasks, two a page")
	x.send(call{route: list, path: "/tasks?limit=2&cursor=" + next, token: alice, status: 200, request: requestValid})
	x.send(call{route: list, token: bob, status: 200, request: requestValid})
	x.send(call{route: get, path: "/tasks/" + id, token: alice, status: 200, request: requestValid})
	patchKey := uuid.NewString()
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: patchKey, body: `{"status":"done","description":null}`, status: 200, request: requestValid})
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: patchKey, body: `{"status":"done","description":null}`, status: 200, replayed: true, request: requestValid})
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: uuid.NewString(), body: `{}`, status: 200, request: requestValid})

	// Refused keys, bodies and parameters.
	for _, route := range mutations {
		x.send(call{route: route, path: pathOf(route), token: alice, body: bodyOf(route), status: 400, code: idempotency.CodeKeyMissing, request: requestInvalid})
		x.send(call{route: route, path: pathOf(route), token: alice, key: "12345", body: bodyOf(route), status: 400, code: idempotency.CodeKeyInvalid, request: requestInvalid})
		x.send(call{route: route, path: pathOf(route), token: alice, key: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", body: bodyOf(route), status: 400, code: idempotency.CodeKeyInvalid, request: requestInvalid})
	}
	x.send(call{route: post, token: alice, key: uuid.NewString(), body: `{"title":"  ","colour":"red"}`, status: 400, code: problem.CodeValidation, request: requestInvalid})
	x.send(call{route: post, token: alice, key: uuid.NewString(), body: `{"status":"doing"}`, status: 400, code: problem.CodeValidation, request: requestInvalid})
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: uuid.NewString(), body: `{"title":null,"due_date":"2026-02-30"}`, status: 400, code: problem.CodeValidation, request: requestInvalid})
	x.send(call{route: list, path: "/tasks?limit=0", token: alice, status: 400, code: problem.CodeValidation, request: requestInvalid})
	x.send(call{route: list, path: "/tasks?limit=101", token: alice, status: 400, code: problem.CodeValidation, request: requestInvalid})
	x.send(call{route: list, path: "/tasks?cursor=" + next, token: bob, status: 400, code: problem.CodeValidation})
	big := `{"title":"` + strings.Repeat("x", 70<<10) + `"}`
	x.send(call{route: post, token: alice, key: uuid.NewString(), body: big, status: 413, code: idempotency.CodePayloadTooLarge, request: requestInvalid})
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: uuid.NewString(), body: big, status: 413, code: idempotency.CodePayloadTooLarge, request: requestInvalid})
	huge := `{"title":"` + strings.Repeat("x", 10<<20) + `"}`
	x.send(call{route: post, token: alice, key: uuid.NewString(), body: huge, status: 413, gateway: true, request: requestInvalid})
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: uuid.NewString(), body: huge, status: 413, gateway: true, request: requestInvalid})

	// Unknown tasks: unknown, another user's, not a UUID. A mutation's 404
	// is kept for its key.
	x.send(call{route: get, path: unknown, token: alice, status: 404, code: problem.CodeNotFound, request: requestValid})
	x.send(call{route: get, path: "/tasks/" + id, token: bob, status: 404, code: problem.CodeNotFound, request: requestValid})
	x.send(call{route: get, path: "/tasks/not-a-uuid", token: alice, status: 404, code: problem.CodeNotFound, request: requestInvalid})
	x.send(call{route: patch, path: "/tasks/" + id, token: bob, key: uuid.NewString(), body: `{"status":"todo"}`, status: 404, code: problem.CodeNotFound, request: requestValid})
	goneKey := uuid.NewString()
	x.send(call{route: remove, path: unknown, token: alice, key: goneKey, status: 404, code: problem.CodeNotFound, request: requestValid})
	x.send(call{route: remove, path: unknown, token: alice, key: goneKey, status: 404, code: problem.CodeNotFound, replayed: true, request: requestValid})

	// A key used for another request.
	x.send(call{route: post, token: alice, key: key, body: `{"title":"Something else"}`, status: 422, code: idempotency.CodeKeyReused})
	x.send(call{route: patch, path: "/tasks/" + id, token: alice, key: patchKey, body: `{"status":"todo"}`, status: 422, code: idempotency.CodeKeyReused})
	x.send(call{route: remove, path: "/tasks/" + id, token: alice, key: goneKey, status: 422, code: idempotency.CodeKeyReused})

	// Tokens: none or expired is the gateway's own 401; one without a
	// subject reaches the functions, which answer unauthenticated.
	for _, route := range everyRoute {
		path := pathOf(route)
		x.send(call{route: route, path: path, key: keyFor(route), body: bodyOf(route), status: 401, gateway: true, request: requestInvalid})
		x.send(call{route: route, path: path, token: expired, key: keyFor(route), body: bodyOf(route), status: 401, gateway: true})
		x.send(call{route: route, path: path, token: noSub, key: keyFor(route), body: bodyOf(route), status: 401, code: idempotency.CodeUnauthenticated})
	}

	// A subject that is not a UUID (Auth0's) is a user of its own: it
	// creates and replays its tasks, lists them, and sees nobody else's.
	auth0Key := uuid.NewString()
	own := x.send(call{route: post, token: auth0, key: auth0Key, body: `{"title":"From Auth0"}`, status: 201, request: requestValid})
	x.send(call{route: post, token: auth0, key: auth0Key, body: `{"title":"From Auth0"}`, status: 201, replayed: true, request: requestValid})
	ownID, _ := own.json["id"].(string)
	require.NotEmpty(t, ownID)
	x.send(call{route: get, path: "/tasks/" + ownID, token: auth0, status: 200, request: requestValid})
	x.send(call{route: get, path: "/tasks/" + ownID, token: alice, status: 404, code: problem.CodeNotFound, request: requestValid})
	ownPage := x.send(call{route: list, token: auth0, status: 200, request: requestValid})
	ownTasks, _ := ownPage.json["tasks"].([]any)
	require.Len(t, ownTasks, 1, "the Auth0 user's own task, and nobody else's")

	// The same key while its first request still runs: the first requests
	// wait on a lock of the tasks table after claiming their keys.
	victim := x.send(call{route: post, token: alice, key: uuid.NewString(), body: `{"title":"To delete"}`, status: 201, request: requestValid})
	victimID := victim.json["id"].(string)
	tx, err := srv.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // released below; a no-op then
	_, err = tx.Exec(ctx, "LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	held := []call{
		{route: post, token: alice, key: uuid.NewString(), body: `{"title":"Slow"}`, status: 201, request: requestValid},
		{route: patch, path: "/tasks/" + id, token: alice, key: uuid.NewString(), body: `{"title":"Slow"}`, status: 200, request: requestValid},
		{route: remove, path: "/tasks/" + victimID, token: alice, key: uuid.NewString(), status: 204, request: requestValid},
	}
	var keys []string
	var wg sync.WaitGroup
	heldDone := make(chan struct{})
	for _, cl := range held {
		keys = append(keys, cl.key)
		req := x.newRequest(cl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the status matters here
				resp.Body.Close()
			}
		}()
	}
	go func() { wg.Wait(); close(heldDone) }()
	require.Eventually(t, func() bool {
		var n int
		err := srv.db.Pool.QueryRow(ctx, "SELECT count(*) FROM idempotency_keys WHERE key = ANY($1) AND status = 'in_progress'", keys).Scan(&n)
		return err == nil && n == len(keys)
	}, 30*time.Second, 20*time.Millisecond, "the held requests claimed their keys")
	for _, cl := range held {
		cl.status, cl.code, cl.request = 409, idempotency.CodeKeyInUse, requestValid
		a := x.send(cl)
		require.Equal(t, "1", a.header.Get("Retry-After"))
	}
	require.NoError(t, tx.Rollback(ctx))
	<-heldDone
	for _, cl := range held { // now they are done, and replayed
		cl.replayed = true
		x.send(cl)
	}

	// The idempotency store's table is missing: mutations answer 500
	// idempotency_store_misconfigured, without Retry-After (no retry can
	// help), and nothing runs.
	rename := func(from, to string) {
		_, err := srv.db.Pool.Exec(ctx, "ALTER TABLE "+from+" RENAME TO "+to)
		require.NoError(t, err)
	}
	existing := func(route string) string {
		if strings.HasSuffix(route, "{id}") {
			return "/tasks/" + id
		}
		return ""
	}
	rename("idempotency_keys", "idempotency_keys_away")
	for _, route := range mutations {
		a := x.send(call{route: route, path: existing(route), token: alice, key: uuid.NewString(), body: bodyOf(route), status: 500, code: idempotency.CodeStoreMisconfigured, request: requestValid})
		require.Empty(t, a.header.Get("Retry-After"))
	}
	rename("idempotency_keys_away", "idempotency_keys")
	// The database fails: every route answers 503 service_unavailable.
	rename("tasks", "tasks_away")
	for _, route := range everyRoute {
		a := x.send(call{route: route, path: existing(route), token: alice, key: keyFor(route), body: bodyOf(route), status: 503, code: problem.CodeUnavailable, request: requestValid})
		require.NotEmpty(t, a.header.Get("Retry-After"))
	}
	rename("tasks_away", "tasks")
	x.send(call{route: remove, path: "/tasks/" + id, token: alice, key: uuid.NewString(), status: 204, request: requestValid})

	// A path or method without a route is the gateway's 404, which no
	// operation of the document describes; its body is a GatewayMessage.
	for _, p := range []struct{ method, path string }{{"GET", "/nothing-here"}, {"PUT", "/tasks/" + id}} {
		req, err := http.NewRequest(p.method, srv.base+p.path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 404, resp.StatusCode)
		require.Equal(t, `{"message":"Not Found"}`, string(b))
		ok, _ := c.validator.ValidateHttpRequestSync(req)
		require.False(t, ok, "%s documents %s %s, which has no route", openapiFile, p.method, p.path)
		ok, errs := c.schemas.ValidateSchemaBytes(c.schema("GatewayMessage"), b)
		require.True(t, ok, "the gateway's 404 is a GatewayMessage:\n%s", formatErrors(errs))
	}

	// Every route of the template was answered with success, and every
	// answer the document lists was seen, but a 500: the functions and the
	// gateway answer it only for a bug or a crash, which no request can
	// cause.
	tpl, err := samtemplate.Load(repoPath("template.yaml"))
	require.NoError(t, err)
	for _, r := range templateRoutes(tpl) {
		require.True(t, x.succeeded[r.Key()], "template.yaml's route %s (%s) was not exercised with a success; add calls for it to this test", r.Key(), r.Function)
	}
	for _, want := range c.answers() {
		if strings.Contains(want, " 500 ") {
			continue
		}
		require.True(t, x.seen[want], "%s documents the answer %q, which no call of this test produced; add one", openapiFile, want)
	}
}

func mustToken(t *testing.T, opts localapi.TokenOptions) string {
	t.Helper()
	tok, err := localapi.NewToken(opts)
	require.NoError(t, err)
	return tok
}
