package samtemplate

import (
	"errors"
	"fmt"
	"sort"
)

// ErrUnresolvable is returned (wrapped) by Resolve for a condition it cannot
// evaluate: an unknown condition or parameter, or an intrinsic function
// other than Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition and a Ref to a
// parameter.
var ErrUnresolvable = errors.New("samtemplate: cannot resolve the template's conditions")

// Resolve returns the template as CloudFormation would see it with the
// given parameter values (every other parameter at its Default): each
// condition evaluated, the resources and outputs whose Condition is false
// left out, each Fn::If replaced by the branch it takes, and each
// !Ref AWS::NoValue removed. Other intrinsics stay as they are. t is not
// changed.
func (t *Template) Resolve(params map[string]string) (*Template, error) {
	r := resolver{t: t, params: params, conds: map[string]bool{}, busy: map[string]bool{}}
	names := make([]string, 0, len(t.Section("Conditions")))
	for name := range t.Section("Conditions") {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := r.condition(name); err != nil {
			return nil, err
		}
	}
	for name := range params {
		if _, ok := t.Section("Parameters")[name]; !ok {
			return nil, fmt.Errorf("%w: no parameter %q", ErrUnresolvable, name)
		}
	}

	doc := map[string]any{}
	for section, v := range t.Doc {
		switch section {
		case "Resources", "Outputs":
			kept := map[string]any{}
			for id, item := range v.(map[string]any) {
				m, _ := item.(map[string]any)
				if c, ok := m["Condition"].(string); ok {
					on, err := r.condition(c)
					if err != nil {
						return nil, err
					}
					if !on {
						continue
					}
				}
				x, err := r.value(item)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", section, id, err)
				}
				kept[id] = x
			}
			doc[section] = kept
		case "Conditions", "Parameters":
			doc[section] = v
		default:
			x, err := r.value(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", section, err)
			}
			doc[section] = x
		}
	}
	out := &Template{Doc: doc, Resources: map[string]Resource{}}
	resources, _ := doc["Resources"].(map[string]any)
	for id, v := range resources {
		raw, _ := v.(map[string]any)
		typ, _ := raw["Type"].(string)
		props, _ := raw["Properties"].(map[string]any)
		out.Resources[id] = Resource{LogicalID: id, Type: typ, Properties: props, Raw: raw}
	}
	return out, nil
}

type resolver struct {
	t      *Template
	params map[string]string
	conds  map[string]bool
	busy   map[string]bool
}

// noValue marks a value that !Ref AWS::NoValue removes.
type noValue struct{}

func (r *resolver) condition(name string) (bool, error) {
	if v, ok := r.conds[name]; ok {
		return v, nil
	}
	expr, ok := r.t.Section("Conditions")[name]
	if !ok {
		return false, fmt.Errorf("%w: no condition %q", ErrUnresolvable, name)
	}
	if r.busy[name] {
		return false, fmt.Errorf("%w: condition %q refers to itself", ErrUnresolvable, name)
	}
	r.busy[name] = true
	v, err := r.boolean(expr)
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	r.conds[name] = v
	return v, nil
}

func (r *resolver) boolean(expr any) (bool, error) {
	m, _ := expr.(map[string]any)
	if !IsIntrinsic(m) {
		return false, fmt.Errorf("%w: %v is not a condition function", ErrUnresolvable, expr)
	}
	for fn, arg := range m {
		list, _ := arg.([]any)
		switch fn {
		case "Condition":
			name, _ := arg.(string)
			return r.condition(name)
		case "Fn::Equals":
			if len(list) != 2 {
				return false, fmt.Errorf("%w: Fn::Equals takes two values", ErrUnresolvable)
			}
			a, err := r.scalar(list[0])
			if err != nil {
				return false, err
			}
			b, err := r.scalar(list[1])
			if err != nil {
				return false, err
			}
			return a == b, nil
		case "Fn::Not":
			if len(list) != 1 {
				return false, fmt.Errorf("%w: Fn::Not takes one condition", ErrUnresolvable)
			}
			v, err := r.boolean(list[0])
			return !v, err
		case "Fn::And", "Fn::Or":
			all := fn == "Fn::And"
			for _, c := range list {
				v, err := r.boolean(c)
				if err != nil {
					return false, err
				}
				if v != all {
					return v, nil
				}
			}
			return all, nil
		}
		return false, fmt.Errorf("%w: %s in a condition", ErrUnresolvable, fn)
	}
	return false, nil
}

// scalar returns a literal, or the value of a parameter that a Ref names.
func (r *resolver) scalar(v any) (string, error) {
	if name := refName(v); name != "" {
		if val, ok := r.params[name]; ok {
			return val, nil
		}
		p, ok := r.t.Section("Parameters")[name].(map[string]any)
		if !ok {
			return "", fmt.Errorf("%w: Ref %s is not a parameter", ErrUnresolvable, name)
		}
		return literal(p["Default"]), nil
	}
	if IsIntrinsic(v) {
		return "", fmt.Errorf("%w: %v in Fn::Equals", ErrUnresolvable, v)
	}
	return literal(v), nil
}

func refName(v any) string {
	m, _ := v.(map[string]any)
	if len(m) != 1 {
		return ""
	}
	s, _ := m["Ref"].(string)
	return s
}

// value resolves the Fn::If and AWS::NoValue below v.
func (r *resolver) value(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if refName(x) == "AWS::NoValue" {
			return noValue{}, nil
		}
		if args, ok := x["Fn::If"].([]any); ok && len(x) == 1 {
			if len(args) != 3 {
				return nil, fmt.Errorf("%w: Fn::If takes a condition and two values", ErrUnresolvable)
			}
			name, _ := args[0].(string)
			on, err := r.condition(name)
			if err != nil {
				return nil, err
			}
			if on {
				return r.value(args[1])
			}
			return r.value(args[2])
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			y, err := r.value(e)
			if err != nil {
				return nil, err
			}
			if _, gone := y.(noValue); !gone {
				out[k] = y
			}
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			y, err := r.value(e)
			if err != nil {
				return nil, err
			}
			if _, gone := y.(noValue); !gone {
				out = append(out, y)
			}
		}
		return out, nil
	}
	return v, nil
}
