package samtemplate_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
)

func TestShortFormsBecomeLongForms(t *testing.T) {
	t.Parallel()
	tpl, err := samtemplate.Parse([]byte(`
Resources:
  R:
    Type: AWS::X::Y
    Properties:
      Ref: !Ref A
      GetAtt: !GetAtt Proxy.Endpoint.Address
      GetAttList: !GetAtt [Proxy, Endpoint]
      Sub: !Sub "${A}-x"
      SubList: !Sub ["${B}", {B: !Ref A}]
      Select: !Select [6, !Split [":", !GetAtt Proxy.DBProxyArn]]
      If: !If [C, !Ref AWS::NoValue, "x"]
      Cond: !And [!Equals [!Ref P, redis], !Not [!Condition D]]
      Join: !Join ["", [a, b]]
      AZ: !Select [0, !GetAZs ""]
      Number: 5432
      Quoted: "5432"
      Float: 0.5
      Bool: true
`))
	require.NoError(t, err)
	props := tpl.Resources["R"].Properties
	want := map[string]any{
		"Ref":        map[string]any{"Ref": "A"},
		"GetAtt":     map[string]any{"Fn::GetAtt": []any{"Proxy", "Endpoint.Address"}},
		"GetAttList": map[string]any{"Fn::GetAtt": []any{"Proxy", "Endpoint"}},
		"Sub":        map[string]any{"Fn::Sub": "${A}-x"},
		"SubList":    map[string]any{"Fn::Sub": []any{"${B}", map[string]any{"B": map[string]any{"Ref": "A"}}}},
		"Select": map[string]any{"Fn::Select": []any{int64(6), map[string]any{"Fn::Split": []any{":",
			map[string]any{"Fn::GetAtt": []any{"Proxy", "DBProxyArn"}}}}}},
		"If": map[string]any{"Fn::If": []any{"C", map[string]any{"Ref": "AWS::NoValue"}, "x"}},
		"Cond": map[string]any{"Fn::And": []any{
			map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "P"}, "redis"}},
			map[string]any{"Fn::Not": []any{map[string]any{"Condition": "D"}}}}},
		"Join":   map[string]any{"Fn::Join": []any{"", []any{"a", "b"}}},
		"AZ":     map[string]any{"Fn::Select": []any{int64(0), map[string]any{"Fn::GetAZs": ""}}},
		"Number": int64(5432),
		"Quoted": "5432",
		"Float":  0.5,
		"Bool":   true,
	}
	require.Equal(t, want, props)
	require.True(t, samtemplate.IsIntrinsic(props["Sub"]))
	require.False(t, samtemplate.IsIntrinsic(props["Quoted"]))
}

func TestParseRefusesNonTemplates(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"", "- a\n- b\n", "Description: x\n", "Resources: {R: !Bogus x}\n", "Resources: {R: 1, R: 2}\n"} {
		_, err := samtemplate.Parse([]byte(doc))
		require.Error(t, err, doc)
		require.True(t, errors.Is(err, samtemplate.ErrInvalidTemplate), doc)
	}
}

func TestFunctionsApplyGlobals(t *testing.T) {
	t.Parallel()
	tpl, err := samtemplate.Parse([]byte(`
Globals:
  Function:
    Runtime: provided.al2023
    CodeUri: .
    Environment: {Variables: {A: "1", B: !Ref P}}
Resources:
  F:
    Type: AWS::Serverless::Function
    Metadata: {BuildMethod: makefile}
    Properties:
      Handler: bootstrap
      Environment: {Variables: {B: "2", C: !If [X, a, b]}}
      Events:
        One: {Type: HttpApi, Properties: {Method: post, Path: /x}}
        Two: {Type: Schedule, Properties: {Schedule: rate(1 hour)}}
`))
	require.NoError(t, err)
	fns := tpl.Functions()
	require.Len(t, fns, 1)
	f := fns[0]
	require.Equal(t, "F", f.LogicalID)
	require.Equal(t, ".", f.CodeURI)
	require.Equal(t, "provided.al2023", f.Runtime)
	require.Equal(t, "makefile", f.BuildMethod)
	require.Equal(t, map[string]string{"A": "1", "B": "2", "C": ""}, f.Environment)
	require.Equal(t, []samtemplate.Route{{Method: "POST", Path: "/x", Function: "F"}}, tpl.Routes())
}

// The routes of the project's template are the task API (README.md).
func TestProjectRoutes(t *testing.T) {
	t.Parallel()
	require.Equal(t, []samtemplate.Route{
		{Method: "GET", Path: "/tasks", Function: "ListTasksFunction"},
		{Method: "POST", Path: "/tasks", Function: "CreateTaskFunction"},
		{Method: "DELETE", Path: "/tasks/{id}", Function: "DeleteTaskFunction"},
		{Method: "GET", Path: "/tasks/{id}", Function: "GetTaskFunction"},
		{Method: "PATCH", Path: "/tasks/{id}", Function: "UpdateTaskFunction"},
	}, projectTemplate(t).Routes())
}
