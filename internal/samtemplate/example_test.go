package samtemplate_test

import (
	"fmt"
	"log"

	"github.com/ichido/ichido/internal/samtemplate"
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

// Resolve shows the template as one way to deploy it sees it: here the dev
// stage, which has no RDS Proxy and connects to the cluster directly.
func ExampleTemplate_Resolve() {
	tpl, err := samtemplate.Load("../../template.yaml")
	if err != nil {
		log.Fatal(err)
	}
	for _, stage := range []string{"prod", "dev"} {
		resolved, err := tpl.Resolve(map[string]string{"Stage": stage})
		if err != nil {
			log.Fatal(err)
		}
		fn := resolved.Functions()[0]
		fmt.Println(stage, len(resolved.ResourceIDs("AWS::RDS::DBProxy")), fn.EnvironmentRaw["DB_HOST"], fn.Environment["DB_TLS_CA"])
	}
	// Output:
	// prod 1 map[Fn::GetAtt:[Proxy Endpoint]] system
	// dev 0 map[Fn::GetAtt:[Cluster Endpoint.Address]] rds
}
