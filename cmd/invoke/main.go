// Command invoke runs one function of template.yaml, as its real bootstrap
// binary, under the AWS Lambda Runtime Interface Emulator with one event,
// and prints the function's response: what `sam local invoke -e` does,
// without Docker. It is what `make invoke FN=<LogicalId> EVENT=<file>` runs.
//
//	invoke -fn CreateTaskFunction -event events/create-task.json \
//	       [-env-vars env.json] [-database-url postgres://...] \
//	       [-template template.yaml] [-bootstrap path] [-expect file]
//
// The function's environment is built as SAM CLI builds it: the variables
// the template declares for the function (literal values; "" for
// intrinsics), then env.json's Parameters, then env.json's section for the
// function, then -database-url as DATABASE_URL. Variables env.json sets
// that the template does not declare are passed too, with a warning: SAM
// CLI would drop them.
//
// Without -bootstrap the function is built for the host (linux/$GOARCH,
// CGO_ENABLED=0, -tags lambda.norpc) from ./functions/<name> into
// .local/invoke/<LogicalId>/bootstrap. The emulator is found (or installed)
// by package lambdarie. The response goes to standard output; the
// emulator's and the function's logs to standard error. A function error
// prints its error document and exits with status 1; so does a response
// that differs from the JSON in the -expect file (make invoke-sqs uses it
// with events/expected/).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ichido/ichido/internal/lambdarie"
	"github.com/ichido/ichido/internal/samtemplate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "invoke:", err)
		os.Exit(1)
	}
}

// errFunction is returned by run when the function answered with an error
// document (already printed).
var errFunction = errors.New("the function returned an error")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fn := fs.String("fn", "", "the function's logical id in the template, e.g. CreateTaskFunction (required)")
	eventPath := fs.String("event", "", "the event file, e.g. events/create-task.json; - reads standard input (required)")
	envPath := fs.String("env-vars", "env.json", "environment overrides in sam local's --env-vars format; ignored when the default is missing")
	dbURL := fs.String("database-url", "", "DATABASE_URL for the function, overriding env.json (make invoke passes the private PostgreSQL's)")
	templatePath := fs.String("template", "template.yaml", "the SAM template")
	bootstrap := fs.String("bootstrap", "", "a bootstrap already built for this host; built from ./functions/<name> when empty")
	expectPath := fs.String("expect", "", "a JSON file the response must equal (as JSON); a different response exits with status 1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *fn == "" || *eventPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("usage: invoke -fn <LogicalId> -event <file>")
	}

	event, err := readEvent(*eventPath)
	if err != nil {
		return err
	}
	tpl, err := samtemplate.Load(*templatePath)
	if err != nil {
		return err
	}
	function, err := findFunction(tpl, *fn)
	if err != nil {
		return err
	}

	env, err := functionEnv(function, *envPath, flagSet(fs, "env-vars"), *dbURL, stderr)
	if err != nil {
		return err
	}

	if *bootstrap == "" {
		root, err := lambdarie.ModuleRoot()
		if err != nil {
			return err
		}
		pkg := lambdarie.FunctionPackage(*fn)
		fmt.Fprintf(stderr, "invoke: building %s for linux/%s\n", pkg, runtime.GOARCH)
		if *bootstrap, err = lambdarie.BuildBootstrap(ctx, pkg, filepath.Join(root, ".local", "invoke", *fn)); err != nil {
			return err
		}
	}
	rie, err := lambdarie.Ensure(ctx)
	if err != nil {
		return err
	}
	emu, err := lambdarie.Start(ctx, lambdarie.Options{
		Bootstrap:    *bootstrap,
		RIE:          rie,
		Env:          env,
		FunctionName: *fn,
		Timeout:      time.Duration(number(tpl, *fn, "Timeout", 3)) * time.Second,
		MemoryMB:     int(number(tpl, *fn, "MemorySize", 128)),
		Output:       stderr,
	})
	if err != nil {
		return err
	}
	defer emu.Stop()

	out, err := emu.Invoke(ctx, event)
	var fe *lambdarie.FunctionError
	if err != nil && !errors.As(err, &fe) {
		return err
	}
	fmt.Fprintln(stdout, string(bytes.TrimSpace(out)))
	if fe != nil {
		return errFunction
	}
	if *expectPath != "" {
		return expect(*expectPath, out)
	}
	return nil
}

// errUnexpected is returned by run when the response differs from -expect.
var errUnexpected = errors.New("the response is not the expected one")

// expect compares the response with the JSON in path, as JSON values.
func expect(path string, out []byte) error {
	want, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var a, b any
	if err := json.Unmarshal(want, &a); err != nil {
		return fmt.Errorf("%s is not JSON: %w", path, err)
	}
	if err := json.Unmarshal(out, &b); err != nil {
		return fmt.Errorf("%w: the response is not JSON", errUnexpected)
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Errorf("%w: want %s", errUnexpected, bytes.TrimSpace(want))
	}
	return nil
}

// functionEnv builds a function's environment as SAM CLI does: the
// template's variables, env.json's Parameters and the function's section
// (a missing env.json is fine unless it was asked for), then dbURL as
// DATABASE_URL when given.
func functionEnv(function samtemplate.Function, envPath string, required bool, dbURL string, stderr io.Writer) (map[string]string, error) {
	env := map[string]string{}
	for k, v := range function.Environment {
		env[k] = v
	}
	envFile, err := lambdarie.LoadEnvFile(envPath)
	switch {
	case err == nil:
		overrides := envFile.For(function.LogicalID)
		for _, name := range lambdarie.Undeclared(overrides, function.Environment) {
			fmt.Fprintf(stderr, "invoke: warning: %s sets %s, which the template does not declare for %s (sam local invoke would ignore it)\n", envPath, name, function.LogicalID)
		}
		for k, v := range overrides {
			env[k] = v
		}
	case errors.Is(err, os.ErrNotExist) && !required:
	default:
		return nil, err
	}
	if dbURL != "" {
		env["DATABASE_URL"] = dbURL
	}
	return env, nil
}

func readEvent(path string) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s is not JSON", path)
	}
	return b, nil
}

func findFunction(tpl *samtemplate.Template, id string) (samtemplate.Function, error) {
	var ids []string
	for _, f := range tpl.Functions() {
		if f.LogicalID == id {
			return f, nil
		}
		ids = append(ids, f.LogicalID)
	}
	sort.Strings(ids)
	return samtemplate.Function{}, fmt.Errorf("no function %q in the template; it has %s", id, strings.Join(ids, ", "))
}

// number reads a whole-number property of a function (Timeout in seconds,
// MemorySize in MB), falling back to Globals.Function and then to def.
func number(tpl *samtemplate.Template, id, prop string, def int64) int64 {
	globals, _ := tpl.Section("Globals")["Function"].(map[string]any)
	for _, src := range []map[string]any{tpl.Resources[id].Properties, globals} {
		switch v := src[prop].(type) {
		case int64:
			return v
		case int:
			return int64(v)
		case float64:
			return int64(v)
		}
	}
	return def
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
