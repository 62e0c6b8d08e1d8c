package samtemplate_test

import (
	"fmt"
	"log"

	"github.com/ichido/ichido/pkg/samtemplate"
)

// The routes that the local server serves come from the template.
func ExampleTemplate_Routes() {
	tpl, err := samtemplate.Load("../../template.yaml")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range tpl.Routes() {
		fmt.Println(r.Method, r.Path, r.Function)
	}
	// Output:
	// GET /tasks ListTasksFunction
	// POST /tasks CreateTaskFunction
	// DELETE /tasks/{id} DeleteTaskFunction
	// GET /tasks/{id} GetTaskFunction
	// PATCH /tasks/{id} UpdateTaskFunction
}

// Environment holds literal values; intrinsics read as "".
func ExampleTemplate_Functions() {
	tpl, err := samtemplate.Parse([]byte(`
Resources:
  HelloFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: .
      Environment:
        Variables:
          DB_AUTH: iam
          DB_HOST: !GetAtt Proxy.Endpoint
`))
	if err != nil {
		log.Fatal(err)
	}
	fn := tpl.Functions()[0]
	fmt.Printf("%s %q %q\n", fn.LogicalID, fn.Environment["DB_AUTH"], fn.Environment["DB_HOST"])
	fmt.Println(fn.EnvironmentRaw["DB_HOST"])
	// Output:
	// HelloFunction "iam" ""
	// map[Fn::GetAtt:[Proxy Endpoint]]
}
