package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// awsCLI runs the AWS CLI, whose credentials and region are the ones
// sam deploy used. run is replaced in tests.
type awsCLI struct {
	region string
	run    func(ctx context.Context, args ...string) ([]byte, error)
}

func newAWSCLI(region string) *awsCLI {
	return &awsCLI{region: region, run: func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "aws", args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("aws %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}}
}

// call runs one command with JSON output and decodes it into v (nil: no
// output wanted).
func (a *awsCLI) call(ctx context.Context, v any, args ...string) error {
	args = append(args, "--output", "json")
	if a.region != "" {
		args = append(args, "--region", a.region)
	}
	out, err := a.run(ctx, args...)
	if err != nil {
		return err
	}
	if v == nil || len(bytes.TrimSpace(out)) == 0 {
		return nil
	}
	return json.Unmarshal(out, v)
}

// The stack outputs smoke reads (template.yaml's Outputs).
var requiredOutputs = []string{"ApiUrl", "UserPoolId", "UserPoolClientId", "TaskEventsQueueUrl", "MigrateFunctionName"}

// runStack checks a deployed stack.
func runStack(ctx context.Context, o options, r *report) {
	aws := newAWSCLI(o.region)
	if _, err := exec.LookPath("aws"); err != nil {
		r.section("stack " + o.stack)
		r.failf("aws-cli", "the AWS CLI (aws) is not on PATH: smoke reads the stack and makes its test user with it")
		return
	}
	checkStack(ctx, o, aws, r)
}

func checkStack(ctx context.Context, o options, aws *awsCLI, r *report) {
	r.section("stack " + o.stack + ": outputs (aws cloudformation describe-stacks)")
	outputs, err := stackOutputs(ctx, aws, o.stack)
	if err != nil {
		r.failf("stack-outputs", "%v", err)
		return
	}
	var missing []string
	for _, k := range requiredOutputs {
		if outputs[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		r.failf("stack-outputs", "the stack has no output %s: deployed from another template?", strings.Join(missing, ", "))
		return
	}
	r.passf("stack-outputs", "ApiUrl %s, user pool %s", outputs["ApiUrl"], outputs["UserPoolId"])
	base := o.url
	if base == "" {
		base = outputs["ApiUrl"]
	}

	token, sub := o.token, ""
	if token == "" {
		user, err := createTestUser(ctx, aws, outputs["UserPoolId"], outputs["UserPoolClientId"])
		if user != nil {
			defer func() {
				r.section("cleanup")
				if err := user.delete(ctx, aws); err != nil {
					r.failf("test-user-gone", "deleting %s: %v", user.name, err)
				} else {
					r.passf("test-user-gone", "deleted the test user %s", user.name)
				}
			}()
		}
		if err != nil {
			r.failf("test-user", "%v", err)
			return
		}
		token, sub = user.token, user.sub
		r.passf("test-user", "created %s (sub %s) and signed in with ADMIN_USER_PASSWORD_AUTH", user.name, sub)
	} else {
		claims, err := jwtClaims(token)
		if err != nil {
			r.failf("token", "%v", err)
			return
		}
		sub, _ = claims["sub"].(string)
		r.skipf("test-user", "a token was given (-token/SMOKE_TOKEN), for sub %s; no test user made", sub)
	}

	httpChecks(ctx, o.bin, base, token, r)

	r.section("SQS: one task event sent twice has one effect (TaskEventsQueue, TaskActivityFunction's log)")
	stackQueueCheck(ctx, aws, o.stack, outputs["TaskEventsQueueUrl"], sub, r)

	r.section("pg_cron: the key store's purge (cron.job, cron.job_run_details)")
	if o.databaseURL == "" {
		why := fmt.Sprintf("the stack's database is private (no public endpoint, no Data API) and its migrate function (%s) does not report cron.job_run_details; give -database-url (SMOKE_DATABASE_URL) through a tunnel to check it", outputs["MigrateFunctionName"])
		r.skipf("purge-job", "%s", why)
		r.skipf("purge-last-run", "see purge-job")
	} else {
		r.note("database: %s", redact(o.databaseURL))
		// Aurora runs all the time: an hourly job whose newest run is
		// older than two hours has stopped running.
		purgeChecks(ctx, o.databaseURL, 2*time.Hour, r)
	}
}

func stackOutputs(ctx context.Context, aws *awsCLI, stack string) (map[string]string, error) {
	var resp struct {
		Stacks []struct {
			StackStatus string
			Outputs     []struct{ OutputKey, OutputValue string }
		}
	}
	if err := aws.call(ctx, &resp, "cloudformation", "describe-stacks", "--stack-name", stack); err != nil {
		return nil, err
	}
	if len(resp.Stacks) != 1 {
		return nil, fmt.Errorf("describe-stacks found %d stacks named %s", len(resp.Stacks), stack)
	}
	s := resp.Stacks[0]
	if !strings.HasSuffix(s.StackStatus, "_COMPLETE") || strings.Contains(s.StackStatus, "ROLLBACK") {
		return nil, fmt.Errorf("the stack is %s, not CREATE_COMPLETE or UPDATE_COMPLETE", s.StackStatus)
	}
	out := map[string]string{}
	for _, o := range s.Outputs {
		out[o.OutputKey] = o.OutputValue
	}
	return out, nil
}

// testUser is a Cognito user made for one smoke run.
type testUser struct {
	pool, name, sub, token string
}

// createTestUser makes a user with a random password, sets it (so that no
// password change is asked for) and signs in with the administrator's
// password flow, which the template's client allows
// (ALLOW_ADMIN_USER_PASSWORD_AUTH). A user is returned as soon as it
// exists, so that it is deleted even when signing in fails.
func createTestUser(ctx context.Context, aws *awsCLI, pool, client string) (*testUser, error) {
	u := &testUser{pool: pool, name: "ichido-smoke-" + randomHex(6) + "@example.invalid"}
	// Meets the pool's policy: 12 or more, lower and upper case, digits.
	password := "Sm0ke-" + randomHex(12) + "-X"
	if err := aws.call(ctx, nil, "cognito-idp", "admin-create-user", "--user-pool-id", pool, "--username", u.name,
		"--message-action", "SUPPRESS", "--user-attributes", "Name=email,Value="+u.name, "Name=email_verified,Value=true"); err != nil {
		return nil, err
	}
	if err := aws.call(ctx, nil, "cognito-idp", "admin-set-user-password", "--user-pool-id", pool, "--username", u.name,
		"--password", password, "--permanent"); err != nil {
		return u, err
	}
	var auth struct {
		AuthenticationResult struct{ AccessToken string }
		ChallengeName        string
	}
	if err := aws.call(ctx, &auth, "cognito-idp", "admin-initiate-auth", "--user-pool-id", pool, "--client-id", client,
		"--auth-flow", "ADMIN_USER_PASSWORD_AUTH", "--auth-parameters", "USERNAME="+u.name+",PASSWORD="+password); err != nil {
		return u, err
	}
	if auth.AuthenticationResult.AccessToken == "" {
		return u, fmt.Errorf("admin-initiate-auth gave no access token (challenge %q)", auth.ChallengeName)
	}
	u.token = auth.AuthenticationResult.AccessToken
	claims, err := jwtClaims(u.token)
	if err != nil {
		return u, err
	}
	u.sub, _ = claims["sub"].(string)
	return u, nil
}

func (u *testUser) delete(ctx context.Context, aws *awsCLI) error {
	return aws.call(context.WithoutCancel(ctx), nil, "cognito-idp", "admin-delete-user", "--user-pool-id", u.pool, "--username", u.name)
}

// stackQueueCheck sends one task event twice to the queue, as a producer
// that resends it would (two messages, one event_id), and reads
// TaskActivityFunction's log: the library logs one line per record with
// its outcome, so one event has one "completed" run and the other copy is
// "replayed" (or "in_progress" first, then "replayed" on redelivery).
func stackQueueCheck(ctx context.Context, aws *awsCLI, stack, queueURL, sub string, r *report) {
	if !uuidRE.MatchString(sub) {
		r.skipf("sqs-once", "the token's sub %q is not a UUID, which a task event's user_id must be", sub)
		return
	}
	var res struct {
		StackResourceDetail struct{ PhysicalResourceId string }
	}
	if err := aws.call(ctx, &res, "cloudformation", "describe-stack-resource", "--stack-name", stack,
		"--logical-resource-id", "TaskActivityFunctionLogGroup"); err != nil {
		r.failf("sqs-once", "finding TaskActivityFunction's log group: %v", err)
		return
	}
	group := res.StackResourceDetail.PhysicalResourceId
	id, body := taskEvent(sub)
	since := time.Now().Add(-time.Minute).UnixMilli()
	for range 2 {
		if err := aws.call(ctx, nil, "sqs", "send-message", "--queue-url", queueURL, "--message-body", body); err != nil {
			r.failf("sqs-once", "sending the event: %v", err)
			return
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	var completed, replayed, other int
	for {
		var logs struct{ Events []struct{ Message string } }
		err := aws.call(ctx, &logs, "logs", "filter-log-events", "--log-group-name", group,
			"--start-time", fmt.Sprint(since), "--filter-pattern", fmt.Sprintf(`{ $.key = "%s" }`, id))
		if err != nil {
			r.failf("sqs-once", "reading %s: %v", group, err)
			return
		}
		completed, replayed, other = 0, 0, 0
		for _, e := range logs.Events {
			var line struct {
				Outcome string `json:"outcome"`
			}
			if json.Unmarshal([]byte(e.Message), &line) != nil {
				continue
			}
			switch line.Outcome {
			case "completed":
				completed++
			case "replayed":
				replayed++
			default:
				other++
			}
		}
		if completed+replayed >= 2 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	switch {
	case completed == 1 && replayed >= 1:
		r.passf("sqs-once", "event %s sent twice: 1 run (completed), %d replayed, in %s", id, replayed, group)
	case completed > 1:
		r.failf("sqs-once", "event %s sent twice ran %d times (%s)", id, completed, group)
	default:
		r.failf("sqs-once", "event %s sent twice: %d completed, %d replayed, %d other outcome lines in %s within 2 minutes (is the log level above info, or are keys logged as digests?)", id, completed, replayed, other, group)
	}
	r.note("left: the activity entry of %s (the API has no way to delete it; it is a row of task_activity)", id)
}
