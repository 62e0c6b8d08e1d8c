// Package samtemplate reads the project's SAM template (template.yaml) so
// that the code can follow it instead of repeating it: the local server
// takes its routes from Routes, the tests cross-check Functions against the
// build targets and the environment variables the code reads, and Tools
// runs AWS's own checks on it: cfn-lint, and the SAM translator that a
// deploy applies (Tools.Transform), whose output cfn-lint checks again.
//
// CloudFormation's short-form tags (!Ref, !GetAtt, !Sub, !If, ...) are
// rewritten to their long JSON form while loading, so `!Ref X` and
// `{"Ref": "X"}` read the same everywhere.
package samtemplate

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// ErrInvalidTemplate is returned (wrapped) by Load and Parse for a document
// that is not a template: not YAML, not a mapping, or without Resources.
var ErrInvalidTemplate = errors.New("samtemplate: invalid template")

// Template is a loaded template in CloudFormation's long JSON form.
type Template struct {
	// Doc is the whole document as plain Go values (map[string]any, []any,
	// string, bool, int64, float64, nil).
	Doc map[string]any
	// Resources maps each logical id to its resource.
	Resources map[string]Resource
}

// Resource is one entry of the template's Resources section.
type Resource struct {
	// LogicalID is the resource's key in Resources.
	LogicalID string
	// Type is the resource type, e.g. "AWS::Serverless::Function".
	Type string
	// Properties is the resource's Properties, or nil.
	Properties map[string]any
	// Raw is the whole resource (Type, Properties, Condition, Metadata, ...).
	Raw map[string]any
}

// Route is one API event of a function: an HTTP method and path served by
// the function with the given logical id.
type Route struct {
	// Method is the HTTP method in upper case ("POST"), or "ANY".
	Method string
	// Path is the path as written in the template, e.g. "/tasks/{id}".
	Path string
	// Function is the logical id of the function that serves the route.
	Function string
}

// Function is an AWS::Serverless::Function with the template's Globals
// applied.
type Function struct {
	// LogicalID is the function's key in Resources, e.g. "CreateTaskFunction".
	LogicalID string
	// CodeURI is the function's CodeUri (from Globals when the function has
	// none), e.g. ".".
	CodeURI string
	// Runtime is the function's Runtime, e.g. "provided.al2023".
	Runtime string
	// Handler is the function's Handler, e.g. "bootstrap".
	Handler string
	// Architectures lists the function's architectures, e.g. ["arm64"].
	Architectures []string
	// BuildMethod is the function's Metadata.BuildMethod, e.g. "makefile".
	BuildMethod string
	// Environment maps each declared environment variable to its literal
	// value, or "" when the value is an intrinsic function (a !Ref, !If,
	// !GetAtt, ...). Globals come first; the function's own entries win.
	Environment map[string]string
	// EnvironmentRaw is Environment before literal values were extracted:
	// each value as written, intrinsics in their long JSON form.
	EnvironmentRaw map[string]any
	// Policies is the function's Policies property as written.
	Policies any
	// Routes lists the function's API events.
	Routes []Route
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}

// Parse parses a template from YAML (or JSON, which is YAML) text.
func Parse(data []byte) (*Template, error) {
	v, err := decodeYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidTemplate, err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: the document is not a mapping", ErrInvalidTemplate)
	}
	resources, ok := doc["Resources"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: no Resources mapping", ErrInvalidTemplate)
	}
	t := &Template{Doc: doc, Resources: make(map[string]Resource, len(resources))}
	for id, r := range resources {
		raw, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: resource %s is not a mapping", ErrInvalidTemplate, id)
		}
		typ, _ := raw["Type"].(string)
		props, _ := raw["Properties"].(map[string]any)
		t.Resources[id] = Resource{LogicalID: id, Type: typ, Properties: props, Raw: raw}
	}
	return t, nil
}

// ResourceIDs returns the logical ids of the resources of type typ, sorted.
func (t *Template) ResourceIDs(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Section returns a top-level section of the template (Parameters,
// Conditions, Outputs, ...) as a mapping, or nil.
func (t *Template) Section(name string) map[string]any {
	m, _ := t.Doc[name].(map[string]any)
	return m
}

// globalFunction returns Globals.Function, or nil.
func (t *Template) globalFunction() map[string]any {
	m, _ := t.Section("Globals")["Function"].(map[string]any)
	return m
}

// Functions returns the template's AWS::Serverless::Function resources,
// sorted by logical id, with Globals.Function applied.
func (t *Template) Functions() []Function {
	globals := t.globalFunction()
	var fns []Function
	for _, id := range t.ResourceIDs("AWS::Serverless::Function") {
		r := t.Resources[id]
		prop := func(name string) any {
			if v, ok := r.Properties[name]; ok {
				return v
			}
			return globals[name]
		}
		fn := Function{
			LogicalID:      id,
			CodeURI:        str(prop("CodeUri")),
			Runtime:        str(prop("Runtime")),
			Handler:        str(prop("Handler")),
			Architectures:  strs(prop("Architectures")),
			Environment:    map[string]string{},
			EnvironmentRaw: map[string]any{},
			Policies:       r.Properties["Policies"],
			Routes:         routesOf(id, r),
		}
		if md, ok := r.Raw["Metadata"].(map[string]any); ok {
			fn.BuildMethod = str(md["BuildMethod"])
		}
		for _, src := range []any{globals["Environment"], r.Properties["Environment"]} {
			env, _ := src.(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			for k, v := range vars {
				fn.EnvironmentRaw[k] = v
				fn.Environment[k] = literal(v)
			}
		}
		fns = append(fns, fn)
	}
	return fns
}

// Routes returns every API event (HttpApi and Api) of every function,
// sorted by path and then method.
func (t *Template) Routes() []Route {
	var routes []Route
	for _, fn := range t.Functions() {
		routes = append(routes, fn.Routes...)
	}
	sort.Slice(routes, func(i, j int) bool {
		if routes[i].Path != routes[j].Path {
			return routes[i].Path < routes[j].Path
		}
		return routes[i].Method < routes[j].Method
	})
	return routes
}

func routesOf(id string, r Resource) []Route {
	events, _ := r.Properties["Events"].(map[string]any)
	var routes []Route
	for _, e := range events {
		ev, _ := e.(map[string]any)
		typ := str(ev["Type"])
		if typ != "HttpApi" && typ != "Api" {
			continue
		}
		p, _ := ev["Properties"].(map[string]any)
		method := strings.ToUpper(str(p["Method"]))
		if method == "" || method == "X-AMAZON-APIGATEWAY-ANY-METHOD" {
			method = "ANY"
		}
		routes = append(routes, Route{Method: method, Path: str(p["Path"]), Function: id})
	}
	sort.Slice(routes, func(i, j int) bool {
		return routes[i].Path+" "+routes[i].Method < routes[j].Path+" "+routes[j].Method
	})
	return routes
}

// IsIntrinsic reports whether v is an intrinsic function in long form: a
// mapping with the single key "Ref", "Condition" or "Fn::...".
func IsIntrinsic(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

// literal returns v as a string when it is a literal scalar, "" otherwise.
func literal(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bool, int64, float64:
		return fmt.Sprint(x)
	}
	return ""
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
