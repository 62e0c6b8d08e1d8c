// Command echo is a test function: it answers with the event it got, the
// environment variables it was asked about and what its Lambda context says.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type request struct {
	Fail bool     `json:"fail"`
	Env  []string `json:"env"`
}

func handle(ctx context.Context, raw json.RawMessage) (map[string]any, error) {
	var req request
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	if req.Fail {
		return nil, errors.New("asked to fail")
	}
	env := map[string]*string{}
	for _, name := range req.Env {
		if v, ok := os.LookupEnv(name); ok {
			env[name] = &v
		} else {
			env[name] = nil
		}
	}
	lc, _ := lambdacontext.FromContext(ctx)
	deadline, _ := ctx.Deadline()
	return map[string]any{
		"event":         raw,
		"env":           env,
		"function":      lambdacontext.FunctionName,
		"requestId":     lc.AwsRequestID,
		"secondsToLive": int(time.Until(deadline).Round(time.Second).Seconds()),
	}, nil
}

func main() { lambda.Start(handle) }
