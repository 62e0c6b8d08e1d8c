package samtemplate_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"
)

// The fixed ids of the sample events (events/README.md).
const (
	eventUser      = "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f"
	eventAuth0User = "auth0|6543210fedcba"
	eventTask      = "5b7d1c2e-9f3a-4e6b-8c1d-2a3b4c5d6e7f"
	eventCreateKey = "8e03978e-40d5-43e8-bc93-6894a57f9324"
)

// sampleEvent describes what one file of events/ is for.
type sampleEvent struct {
	function string
	routeKey string
	status   string // the expected status code, as events/README.md gives it
	key      string // "" none, "v4" a UUID v4, "invalid" anything else
	identity bool
}

var sampleEvents = map[string]sampleEvent{
	"create-task.json":             {"CreateTaskFunction", "POST /tasks", "201", "v4", true},
	"create-task-replay.json":      {"CreateTaskFunction", "POST /tasks", "201", "v4", true},
	"create-task-mismatch.json":    {"CreateTaskFunction", "POST /tasks", "422", "v4", true},
	"create-task-missing-key.json": {"CreateTaskFunction", "POST /tasks", "400", "", true},
	"create-task-invalid-key.json": {"CreateTaskFunction", "POST /tasks", "400", "invalid", true},
	"create-task-no-identity.json": {"CreateTaskFunction", "POST /tasks", "401", "v4", false},
	"create-task-auth0.json":       {"CreateTaskFunction", "POST /tasks", "201", "v4", true},
	"list-tasks.json":              {"ListTasksFunction", "GET /tasks", "200", "", true},
	"get-task.json":                {"GetTaskFunction", "GET /tasks/{id}", "200", "", true},
	"update-task.json":             {"UpdateTaskFunction", "PATCH /tasks/{id}", "200", "v4", true},
	"delete-task.json":             {"DeleteTaskFunction", "DELETE /tasks/{id}", "204", "v4", true},
	"migrate.json":                 {"MigrateFunction", "", "", "", false},
	// SQS batches (events.SQSEvent), not API events.
	"sqs-task-events.json":            {"TaskActivityFunction", "", "", "", false},
	"sqs-task-events-redelivery.json": {"TaskActivityFunction", "", "", "", false},
	"sqs-task-events-fifo.json":       {"TaskActivityFunction", "", "", "", false},
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func readEvent(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "events", name))
	require.NoError(t, err)
	return b
}

// decodeStrict decodes b into v, refusing fields that v does not have (a
// misspelt "requestContext" would otherwise pass unnoticed).
func decodeStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v))
}

func TestEventFilesAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(moduleRoot(t), "events")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	var got, want []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	for name := range sampleEvents {
		want = append(want, name)
	}
	sort.Strings(want)
	require.Equal(t, want, got)

	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	rows := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2]) + "|" + strings.TrimSpace(cells[3])
	}
	for name, ev := range sampleEvents {
		row, ok := rows[name]
		require.True(t, ok, "events/README.md has no row for %s", name)
		fn, status, _ := strings.Cut(row, "|")
		require.Equal(t, ev.function, strings.Trim(fn, "`"), "events/README.md: the function of %s", name)
		if ev.status != "" {
			require.True(t, strings.HasPrefix(status, ev.status), "events/README.md: the status of %s is %q, want %s", name, status, ev.status)
		}
	}
	for _, id := range []string{eventUser, eventTask, eventCreateKey} {
		require.Contains(t, string(readme), id)
	}
}

// Every API event is an HTTP API (v2) event that round-trips through
// aws-lambda-go's type, for a route of the template, from the fixed user.
func TestEventsAreHTTPAPIEvents(t *testing.T) {
	t.Parallel()
	routes := map[string]string{}
	for _, r := range projectTemplate(t).Routes() {
		routes[r.Method+" "+r.Path] = r.Function
	}
	for name, want := range sampleEvents {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := readEvent(t, name)
			if want.routeKey == "" { // the migrate function takes any JSON object; the SQS batches are checked in sqs_events_test.go
				var obj map[string]any
				require.NoError(t, json.Unmarshal(b, &obj))
				return
			}
			var ev events.APIGatewayV2HTTPRequest
			decodeStrict(t, b, &ev)
			out, err := json.Marshal(ev)
			require.NoError(t, err)
			var again events.APIGatewayV2HTTPRequest
			decodeStrict(t, out, &again)
			require.Equal(t, ev, again, "round trip")

			require.Equal(t, "2.0", ev.Version)
			require.Equal(t, want.routeKey, ev.RouteKey)
			require.Equal(t, want.routeKey, ev.RequestContext.RouteKey)
			require.Equal(t, want.function, routes[ev.RouteKey], "the template's function for %s", ev.RouteKey)
			method, _, _ := strings.Cut(want.routeKey, " ")
			require.Equal(t, method, ev.RequestContext.HTTP.Method)
			require.Equal(t, ev.RawPath, ev.RequestContext.HTTP.Path)
			if strings.Contains(want.routeKey, "{id}") {
				require.Equal(t, eventTask, ev.PathParameters["id"])
				require.Equal(t, "/tasks/"+eventTask, ev.RawPath)
			}
			for k := range ev.Headers {
				require.Equal(t, strings.ToLower(k), k, "HTTP API gives header names in lower case")
			}

			if want.identity {
				require.NotNil(t, ev.RequestContext.Authorizer)
				require.NotNil(t, ev.RequestContext.Authorizer.JWT)
				user := eventUser
				if name == "create-task-auth0.json" {
					user = eventAuth0User // another identity provider's subject
				}
				require.Equal(t, user, ev.RequestContext.Authorizer.JWT.Claims["sub"])
			} else {
				require.Nil(t, ev.RequestContext.Authorizer)
			}
			key, hasKey := ev.Headers["idempotency-key"]
			switch want.key {
			case "":
				require.False(t, hasKey)
			case "v4":
				require.Regexp(t, uuidV4, key)
			case "invalid":
				require.True(t, hasKey)
				require.NotRegexp(t, uuidV4, strings.ToLower(key))
			}
			if ev.Body != "" {
				require.True(t, json.Valid([]byte(ev.Body)), "body")
				require.Equal(t, "application/json", ev.Headers["content-type"])
			}
		})
	}
}

// The replay repeats the first request; the mismatch reuses its key with
// another body; the no-identity case differs from the first only by the
// missing authorizer (and its own key, so that it never meets the first).
func TestIdempotencyCases(t *testing.T) {
	t.Parallel()
	load := func(name string) events.APIGatewayV2HTTPRequest {
		var ev events.APIGatewayV2HTTPRequest
		decodeStrict(t, readEvent(t, name), &ev)
		return ev
	}
	first := load("create-task.json")
	replay := load("create-task-replay.json")
	mismatch := load("create-task-mismatch.json")
	require.Equal(t, eventCreateKey, first.Headers["idempotency-key"])
	require.Equal(t, first.Headers["idempotency-key"], replay.Headers["idempotency-key"])
	require.Equal(t, first.Body, replay.Body)
	require.Equal(t, first.RawPath, replay.RawPath)
	require.NotEqual(t, first.RequestContext.RequestID, replay.RequestContext.RequestID)
	require.Equal(t, first.Headers["idempotency-key"], mismatch.Headers["idempotency-key"])
	require.NotEqual(t, first.Body, mismatch.Body)

	keys := map[string]string{}
	for _, name := range []string{"create-task.json", "create-task-no-identity.json", "update-task.json", "delete-task.json"} {
		k := load(name).Headers["idempotency-key"]
		require.NotContains(t, keys, k, "%s reuses the key of %s", name, keys[k])
		keys[k] = name
	}
	for _, name := range []string{"create-task-missing-key.json", "create-task-invalid-key.json", "create-task-no-identity.json"} {
		require.Equal(t, first.Body, load(name).Body, name)
	}
}

// env.json is in `sam local --env-vars` form, and sets only variables the
// template declares (SAM CLI ignores the others).
func TestEnvJSON(t *testing.T) {
	t.Parallel()
	var env map[string]map[string]string
	decodeStrict(t, func() []byte {
		b, err := os.ReadFile(filepath.Join(moduleRoot(t), "env.json"))
		require.NoError(t, err)
		return b
	}(), &env)
	require.Equal(t, "url", env["Parameters"]["DB_AUTH"], "local runs use DATABASE_URL")
	require.NotEmpty(t, env["Parameters"]["DATABASE_URL"])
	fns := map[string]map[string]string{}
	for _, fn := range projectTemplate(t).Functions() {
		fns[fn.LogicalID] = fn.Environment
	}
	for scope, vars := range env {
		if scope == "Parameters" {
			for name := range vars {
				for id, declared := range fns {
					require.Contains(t, declared, name, "env.json sets %s for every function; %s does not declare it", name, id)
				}
			}
			continue
		}
		declared, ok := fns[scope]
		require.True(t, ok, "env.json: %s is not a function of the template", scope)
		for name := range vars {
			require.Contains(t, declared, name, "env.json sets %s for %s, which does not declare it", name, scope)
		}
	}
}
