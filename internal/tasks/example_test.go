package tasks_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// A create body is checked member by member; every invalid field is named.
func ExampleParseNewTask() {
	_, err := tasks.ParseNewTask([]byte(`{"title":"","status":"later","colour":"red"}`))
	var verr *tasks.ValidationError
	if errors.As(err, &verr) {
		for _, f := range verr.Fields {
			fmt.Printf("%s: %s\n", f.Field, f.Detail)
		}
	}
	// Output:
	// title: must not be empty or blank
	// status: must be one of "todo", "in_progress", "done"
	// colour: is not a known field
}

// In a PATCH body, null clears an optional field and absent members are
// left alone.
func ExampleParsePatch() {
	p, err := tasks.ParsePatch([]byte(`{"status":"done","due_date":null}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(*p.Status, p.ClearDueDate, p.Title == nil)
	// Output: done true true
}

// The create handler behind the idempotency decorator, as a Lambda main
// would serve it (package taskfn does this from the environment).
func ExampleAPI_Create() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	api := tasks.NewAPI(tasks.NewService(pool), nil)
	store, err := pgstore.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	create, err := idempotency.Wrap(api.Create, idempotency.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(create)
}
