package localapi

import (
	"fmt"
	"net/url"
	"strings"
)

// DefaultRouteKey is the route key of an HTTP API's catch-all route.
const DefaultRouteKey = "$default"

// Route binds an HTTP API route to the function that serves it.
type Route struct {
	// Method is the HTTP method in upper case, or "ANY". Ignored for the
	// $default route.
	Method string
	// Path is the route's path as written in the template, with {name}
	// variables and an optional greedy {name+} last segment, e.g.
	// "/tasks/{id}"; or "$default".
	Path string
	// Function is the logical id of the function that serves the route.
	Function string
}

// Key returns the route key API Gateway puts in the event, e.g.
// "GET /tasks/{id}" or "$default".
func (r Route) Key() string {
	if r.Path == DefaultRouteKey {
		return DefaultRouteKey
	}
	return strings.ToUpper(r.Method) + " " + r.Path
}

// segment kinds, in the order of their specificity: a literal segment
// beats a variable, which beats a greedy variable.
const (
	segLiteral = iota
	segVar
	segGreedy
)

type segment struct {
	kind  int
	value string // the literal, or the variable's name
}

type compiledRoute struct {
	Route
	method   string // upper case; "ANY" matches every method
	segments []segment
	catchAll bool
}

// RouteError reports a route that the gateway cannot serve.
type RouteError struct {
	// Route is the offending route.
	Route Route
	// Reason says what is wrong with it.
	Reason string
}

func (e *RouteError) Error() string {
	return fmt.Sprintf("localapi: route %q (function %q): %s", e.Route.Key(), e.Route.Function, e.Reason)
}

func compileRoute(r Route) (compiledRoute, error) {
	c := compiledRoute{Route: r, method: strings.ToUpper(r.Method)}
	if r.Path == DefaultRouteKey {
		c.catchAll = true
		return c, nil
	}
	if c.method == "" {
		return c, &RouteError{Route: r, Reason: "no method"}
	}
	if !strings.HasPrefix(r.Path, "/") {
		return c, &RouteError{Route: r, Reason: "the path must start with /"}
	}
	if r.Path == "/" {
		return c, nil
	}
	parts := strings.Split(strings.TrimPrefix(r.Path, "/"), "/")
	for i, p := range parts {
		switch {
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "+}"):
			if i != len(parts)-1 {
				return c, &RouteError{Route: r, Reason: "a greedy variable must be the last segment"}
			}
			c.segments = append(c.segments, segment{kind: segGreedy, value: p[1 : len(p)-2]})
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}"):
			c.segments = append(c.segments, segment{kind: segVar, value: p[1 : len(p)-1]})
		case strings.ContainsAny(p, "{}"):
			return c, &RouteError{Route: r, Reason: "a variable must fill a whole segment"}
		default:
			c.segments = append(c.segments, segment{kind: segLiteral, value: p})
		}
	}
	return c, nil
}

// match reports whether the route serves method and the escaped path, and
// returns its path parameters (decoded) and a specificity score: higher
// wins.
func (c *compiledRoute) match(method, escapedPath string) (map[string]string, []int, bool) {
	if c.catchAll {
		return nil, []int{-1}, true
	}
	if c.method != "ANY" && c.method != method {
		return nil, nil, false
	}
	var parts []string
	if escapedPath != "/" {
		parts = strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	}
	var params map[string]string
	score := make([]int, 0, len(c.segments)+1)
	for i, seg := range c.segments {
		if i >= len(parts) {
			return nil, nil, false
		}
		switch seg.kind {
		case segLiteral:
			v, err := url.PathUnescape(parts[i])
			if err != nil || v != seg.value {
				return nil, nil, false
			}
			score = append(score, 3)
		case segVar:
			v, err := url.PathUnescape(parts[i])
			if err != nil || v == "" {
				return nil, nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[seg.value] = v
			score = append(score, 2)
		case segGreedy:
			v, err := url.PathUnescape(strings.Join(parts[i:], "/"))
			if err != nil || v == "" {
				return nil, nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[seg.value] = v
			score = append(score, 1)
			parts = parts[:i+1] // consumed
		}
	}
	if len(parts) != len(c.segments) {
		return nil, nil, false
	}
	if c.method == "ANY" {
		score = append(score, 0)
	} else {
		score = append(score, 1)
	}
	return params, score, true
}

// router picks the most specific route for a request.
type router struct {
	routes []compiledRoute
}

func newRouter(routes []Route) (*router, error) {
	rt := &router{}
	seen := map[string]bool{}
	for _, r := range routes {
		c, err := compileRoute(r)
		if err != nil {
			return nil, err
		}
		if seen[r.Key()] {
			return nil, &RouteError{Route: r, Reason: "declared twice"}
		}
		seen[r.Key()] = true
		rt.routes = append(rt.routes, c)
	}
	return rt, nil
}

func (rt *router) find(method, escapedPath string) (*compiledRoute, map[string]string, bool) {
	var (
		best       *compiledRoute
		bestParams map[string]string
		bestScore  []int
	)
	for i := range rt.routes {
		params, score, ok := rt.routes[i].match(method, escapedPath)
		if ok && (best == nil || better(score, bestScore)) {
			best, bestParams, bestScore = &rt.routes[i], params, score
		}
	}
	return best, bestParams, best != nil
}

// better compares specificity scores segment by segment, as API Gateway
// prefers a literal segment to a variable and a variable to a greedy one.
func better(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return len(a) > len(b)
}
