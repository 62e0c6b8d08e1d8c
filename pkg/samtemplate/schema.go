package samtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrUnknownResourceType is returned (wrapped) by Validator for a resource
// whose type the schema does not define.
var ErrUnknownResourceType = errors.New("samtemplate: resource type not in the schema")

// intrinsicDef is the name of the definition that Validator adds to the
// schema: an intrinsic function in long form, i.e. a mapping with exactly one
// key, "Ref", "Condition" or "Fn::<Name>".
const intrinsicDef = "__ichido_intrinsic"

// Validator checks template resources against the SAM + CloudFormation
// unified JSON schema (draft-04), one resource at a time, each against the
// definition of its own type.
//
// The upstream schema rejects intrinsic functions wherever it expects a typed
// value (a string, a number, a list). Validator patches it when loading: every
// schema below a resource's Properties, and every shared definition, becomes
// "anyOf: [the original schema, an intrinsic function]". An intrinsic is
// accepted in place of any value, and nothing else is loosened: an unknown
// property, a missing required property or a wrong JSON type is still an
// error. The resource's own keys (Type, Condition, DependsOn, DeletionPolicy,
// ...) are not patched, since CloudFormation does not allow intrinsics there.
type Validator struct {
	definitions map[string]any    // the patched schema's definitions
	globals     any               // the patched schema of the Globals section
	sections    map[string]bool   // the top-level sections the schema allows
	defs        map[string]string // resource type -> definition name

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
}

// NewValidator loads the unified schema at path and patches it to accept
// intrinsic functions. Definitions are compiled on first use.
func NewValidator(path string) (*Validator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: the SAM schema: %w", err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: the SAM schema %s: %w", path, err)
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("samtemplate: the SAM schema %s is not a JSON object", path)
	}
	defs, types, err := resourceDefinitions(root)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: the SAM schema %s: %w", path, err)
	}
	patchSchema(root, defs)
	props, _ := root["properties"].(map[string]any)
	sections := map[string]bool{}
	for name := range props {
		sections[name] = true
	}
	return &Validator{
		sections:    sections,
		definitions: root["definitions"].(map[string]any),
		globals:     props["Globals"],
		defs:        types,
		compiled:    map[string]*jsonschema.Schema{},
	}, nil
}

// resourceDefinitions reads the root's Resources.additionalProperties.anyOf
// list: the definition of every resource type. It returns the set of those
// definitions and a map from resource type to definition name.
func resourceDefinitions(root map[string]any) (map[string]bool, map[string]string, error) {
	definitions, _ := root["definitions"].(map[string]any)
	props, _ := root["properties"].(map[string]any)
	resources, _ := props["Resources"].(map[string]any)
	additional, _ := resources["additionalProperties"].(map[string]any)
	anyOf, _ := additional["anyOf"].([]any)
	if definitions == nil || len(anyOf) == 0 {
		return nil, nil, errors.New("no Resources.additionalProperties.anyOf list of resource types")
	}
	defs := map[string]bool{}
	types := map[string]string{}
	for _, ref := range anyOf {
		r, _ := ref.(map[string]any)
		s, _ := r["$ref"].(string)
		name, ok := strings.CutPrefix(s, "#/definitions/")
		if !ok {
			continue
		}
		def, _ := definitions[name].(map[string]any)
		dprops, _ := def["properties"].(map[string]any)
		typ, _ := dprops["Type"].(map[string]any)
		enum, _ := typ["enum"].([]any)
		if len(enum) != 1 {
			continue
		}
		if t, ok := enum[0].(string); ok {
			defs[name] = true
			types[t] = name
		}
	}
	return defs, types, nil
}

// patchSchema makes every typed value below a resource's Properties, and
// every shared definition, also accept an intrinsic function.
func patchSchema(root map[string]any, resourceDefs map[string]bool) {
	definitions := root["definitions"].(map[string]any)
	for name, def := range definitions {
		if !resourceDefs[name] {
			definitions[name] = wrapDeep(def)
			continue
		}
		d, _ := def.(map[string]any)
		props, _ := d["properties"].(map[string]any)
		if p, ok := props["Properties"]; ok {
			props["Properties"] = wrapDeep(p)
		}
	}
	definitions[intrinsicDef] = map[string]any{
		"type":          "object",
		"minProperties": json.Number("1"),
		"maxProperties": json.Number("1"),
		"patternProperties": map[string]any{
			"^(Ref|Condition|Fn::[A-Za-z0-9]+)$": map[string]any{},
		},
		"additionalProperties": false,
	}
}

// wrapDeep patches the sub-schemas of node and then node itself.
func wrapDeep(node any) any {
	m, ok := node.(map[string]any)
	if !ok || len(m) == 0 {
		return node // true/false/{}: accepts anything already, or nothing
	}
	patchChildren(m)
	return map[string]any{"anyOf": []any{m, map[string]any{"$ref": "#/definitions/" + intrinsicDef}}}
}

// patchChildren wraps the schemas that describe values (properties, items,
// additional properties) and walks into combinators without wrapping them:
// the schema holding a combinator is wrapped already.
func patchChildren(m map[string]any) {
	for _, key := range []string{"properties", "patternProperties"} {
		if props, ok := m[key].(map[string]any); ok {
			for k, v := range props {
				props[k] = wrapDeep(v)
			}
		}
	}
	if ap, ok := m["additionalProperties"].(map[string]any); ok {
		m["additionalProperties"] = wrapDeep(ap)
	}
	switch items := m["items"].(type) {
	case map[string]any:
		m["items"] = wrapDeep(items)
	case []any:
		for i, v := range items {
			items[i] = wrapDeep(v)
		}
	}
	for _, key := range []string{"anyOf", "allOf", "oneOf"} {
		if list, ok := m[key].([]any); ok {
			for _, v := range list {
				if sub, ok := v.(map[string]any); ok {
					patchChildren(sub)
				}
			}
		}
	}
	if not, ok := m["not"].(map[string]any); ok {
		patchChildren(not)
	}
}

// schemaFor compiles (once) and returns the schema named key: a document
// made of top and the definitions it reaches. Compiling the whole 6 MB schema
// as one document would compile every resource type at once, which takes
// minutes; a resource type's own closure compiles in milliseconds.
func (v *Validator) schemaFor(key string, top any) (*jsonschema.Schema, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.compiled[key]; ok {
		return s, nil
	}
	closure := map[string]any{}
	v.reach(top, closure)
	doc := map[string]any{
		"$schema":     "http://json-schema.org/draft-04/schema#",
		"definitions": closure,
		"allOf":       []any{top},
	}
	url := fmt.Sprintf("file:///sam-unified/%d.json", len(v.compiled))
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("samtemplate: the schema of %s: %w", key, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: compiling the schema of %s: %w", key, err)
	}
	v.compiled[key] = s
	return s, nil
}

// reach adds to closure every definition that node refers to, directly or not.
func (v *Validator) reach(node any, closure map[string]any) {
	switch n := node.(type) {
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok {
			if name, ok := strings.CutPrefix(ref, "#/definitions/"); ok {
				if _, seen := closure[name]; !seen {
					if def, ok := v.definitions[name]; ok {
						closure[name] = def
						v.reach(def, closure)
					}
				}
			}
		}
		for _, child := range n {
			v.reach(child, closure)
		}
	case []any:
		for _, child := range n {
			v.reach(child, closure)
		}
	}
}

// ValidateResource checks one resource against its type's definition.
func (v *Validator) ValidateResource(r Resource) error {
	def, ok := v.defs[r.Type]
	if !ok {
		return fmt.Errorf("%w: %s is %q", ErrUnknownResourceType, r.LogicalID, r.Type)
	}
	s, err := v.schemaFor(r.Type, map[string]any{"$ref": "#/definitions/" + def})
	if err != nil {
		return err
	}
	if err := validate(s, r.Raw); err != nil {
		return fmt.Errorf("resource %s (%s): %w", r.LogicalID, r.Type, err)
	}
	return nil
}

// ValidateGlobals checks the template's Globals section, when it has one.
func (v *Validator) ValidateGlobals(t *Template) error {
	g, ok := t.Doc["Globals"]
	if !ok {
		return nil
	}
	s, err := v.schemaFor("Globals", v.globals)
	if err != nil {
		return err
	}
	if err := validate(s, g); err != nil {
		return fmt.Errorf("Globals: %w", err)
	}
	return nil
}

// Validate checks the top-level section names, Globals and every resource of
// t, in logical-id order, and returns one error per failing part.
func (v *Validator) Validate(t *Template) []error {
	var errs []error
	var names []string
	for name := range t.Doc {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !v.sections[name] {
			errs = append(errs, fmt.Errorf("unknown top-level section %q", name))
		}
	}
	if err := v.ValidateGlobals(t); err != nil {
		errs = append(errs, err)
	}
	ids := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := v.ValidateResource(t.Resources[id]); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// validate runs s over v after a JSON round trip, which gives the validator
// the value types it expects (json.Number for numbers).
func validate(s *jsonschema.Schema, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}
