package samtemplate

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// shortForms maps each CloudFormation short-form tag to the long form's key.
// !GetAtt and !Condition are handled on their own: the first splits its
// scalar form "Resource.Attribute", the second is not an Fn:: function.
var shortForms = map[string]string{
	"!Ref":          "Ref",
	"!Base64":       "Fn::Base64",
	"!Cidr":         "Fn::Cidr",
	"!Equals":       "Fn::Equals",
	"!FindInMap":    "Fn::FindInMap",
	"!GetAZs":       "Fn::GetAZs",
	"!If":           "Fn::If",
	"!ImportValue":  "Fn::ImportValue",
	"!Join":         "Fn::Join",
	"!Length":       "Fn::Length",
	"!Not":          "Fn::Not",
	"!And":          "Fn::And",
	"!Or":           "Fn::Or",
	"!Select":       "Fn::Select",
	"!Split":        "Fn::Split",
	"!Sub":          "Fn::Sub",
	"!ToJsonString": "Fn::ToJsonString",
	"!Transform":    "Fn::Transform",
	"!GetAtt":       "Fn::GetAtt",
	"!Condition":    "Condition",
	// The rule-specific functions of a template's Rules section.
	"!Contains":         "Fn::Contains",
	"!EachMemberEquals": "Fn::EachMemberEquals",
	"!EachMemberIn":     "Fn::EachMemberIn",
	"!RefAll":           "Fn::RefAll",
	"!ValueOf":          "Fn::ValueOf",
	"!ValueOfAll":       "Fn::ValueOfAll",
}

// decodeYAML turns a CloudFormation YAML document into plain Go values
// (map[string]any, []any, string, bool, int64, float64, nil) with every
// short-form intrinsic function rewritten to its long JSON form, so that
// `!Ref X` and `{"Ref": "X"}` read the same.
func decodeYAML(data []byte) (any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 {
		return nil, fmt.Errorf("empty document")
	}
	return convertNode(&doc)
}

func convertNode(n *yaml.Node) (any, error) {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			return nil, fmt.Errorf("line %d: expected one YAML document", n.Line)
		}
		return convertNode(n.Content[0])
	}
	if n.Kind == yaml.AliasNode {
		return convertNode(n.Alias)
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return convertIntrinsic(n)
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a mapping key must be a scalar", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			val, err := convertNode(v)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			val, err := convertNode(c)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		return s, nil
	case yaml.ScalarNode:
		return convertScalar(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func convertScalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, err
		}
		return b, nil
	case "!!int":
		if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
			return i, nil
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		return f, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		return f, nil
	}
	return n.Value, nil
}

func convertIntrinsic(n *yaml.Node) (any, error) {
	key, ok := shortForms[n.Tag]
	if !ok {
		return nil, fmt.Errorf("line %d: unknown tag %s", n.Line, n.Tag)
	}
	// The argument is the node without its tag.
	arg := *n
	arg.Tag = ""
	if n.Kind == yaml.ScalarNode {
		arg.Tag = "!!str"
	}
	val, err := convertNode(&arg)
	if err != nil {
		return nil, err
	}
	if n.Tag == "!GetAtt" {
		if s, ok := val.(string); ok {
			resource, attribute, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %q: want Resource.Attribute", n.Line, s)
			}
			val = []any{resource, attribute}
		}
	}
	return map[string]any{key: val}, nil
}
