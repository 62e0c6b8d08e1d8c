package dbsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
)

// CustomResource answers the requests CloudFormation sends the stack's
// DatabaseSetup custom resource: Create and Update run Setup and reply
// SUCCESS or FAILED with the reason, which fails the deploy; Delete
// changes nothing in the database and replies SUCCESS. The reply is a PUT
// to the request's pre-signed URL, made with the invocation's context and
// bounded by ReplyTimeout. Handle serves any other event with Other.
type CustomResource struct {
	// ResourceID is the resource's physical id, the same on every reply,
	// so that CloudFormation never asks to delete a live setup. Required.
	ResourceID string
	// Setup runs the database setup. Required.
	Setup func(ctx context.Context) (Summary, error)
	// Other serves an event that is not a CloudFormation request. Nil:
	// such an event is an error.
	Other func(ctx context.Context, event json.RawMessage) (any, error)
	// ReplyTimeout bounds the reply to CloudFormation. Defaults to 30
	// seconds.
	ReplyTimeout time.Duration
	// Margin is the part of the invocation's time kept for the reply:
	// Setup's context ends that much before the invocation's. Defaults to
	// ReplyTimeout.
	Margin time.Duration
	// Client sends the reply. Defaults to http.DefaultClient.
	Client *http.Client
	// Log receives the outcome. Defaults to slog.Default().
	Log *slog.Logger
}

// Handle serves one invocation. The invocation fails only when the reply
// could not be sent (Lambda then invokes it again, and the setup, which is
// idempotent, runs again): a failed setup that was replied to is a
// successful invocation, so that Lambda does not retry it.
func (c *CustomResource) Handle(ctx context.Context, event json.RawMessage) (any, error) {
	var req cfn.Event
	if json.Unmarshal(event, &req) != nil || req.RequestType == "" || req.ResponseURL == "" {
		if c.Other == nil {
			return nil, errors.New("dbsetup: not a CloudFormation request")
		}
		return c.Other(ctx, event)
	}
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	replyTimeout := c.ReplyTimeout
	if replyTimeout <= 0 {
		replyTimeout = 30 * time.Second
	}
	margin := c.Margin
	if margin <= 0 {
		margin = replyTimeout
	}
	resp := cfn.NewResponse(&req)
	resp.PhysicalResourceID = c.ResourceID
	var err error
	switch req.RequestType {
	case cfn.RequestCreate, cfn.RequestUpdate:
		work := ctx
		if deadline, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			work, cancel = context.WithDeadline(ctx, deadline.Add(-margin))
			defer cancel()
		}
		var sum Summary
		sum, err = c.Setup(work)
		if err == nil {
			resp.Data = map[string]any{"Version": fmt.Sprint(sum.Version), "Applied": fmt.Sprint(len(sum.Applied)), "Server": sum.Server}
			if sum.Cron != nil {
				resp.Data["Cron"] = sum.Cron.Evidence
			}
			if sum.Ahead != "" {
				resp.Data["Ahead"] = sum.Ahead
				log.Warn("database setup skipped: the database's migrations are newer than this code's (an update rolling back to an earlier version); migrations only go forward, so nothing was migrated, granted or checked",
					"requestType", req.RequestType, "ahead", sum.Ahead, "version", sum.Version)
			}
		}
	case cfn.RequestDelete:
		// A stack that is deleted keeps its data in the final snapshot; a
		// setup that is replaced has the same id and is never deleted.
	default:
		err = fmt.Errorf("unknown RequestType %q", req.RequestType)
	}
	if err != nil {
		resp.Status, resp.Reason = cfn.StatusFailed, reason(err)
	} else {
		resp.Status = cfn.StatusSuccess
	}
	replyCtx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	if sendErr := c.send(replyCtx, resp, req.ResponseURL); sendErr != nil {
		log.Error(fmt.Sprintf("could not reply %s to CloudFormation for %s %s: %v; the stack waits for the reply until the resource's ServiceTimeout",
			resp.Status, req.RequestType, req.LogicalResourceID, sendErr))
		return nil, errors.Join(err, fmt.Errorf("dbsetup: replying to CloudFormation: %w", sendErr))
	}
	if err != nil {
		log.Error("database setup failed", "requestType", req.RequestType, "error", err.Error())
	} else {
		log.Info("database setup done", "requestType", req.RequestType, "data", resp.Data)
	}
	return nil, nil
}

// send PUTs the reply to the pre-signed URL, as cfn.Response.Send does (no
// Content-Type: the URL's signature has none), within ctx.
func (c *CustomResource) send(ctx context.Context, resp *cfn.Response, url string) error {
	body, err := replyBody(resp)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(body))
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", res.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// maxReply is the most a custom resource's reply may hold, in bytes of its
// JSON body.
const maxReply = 4096

// reasonCut ends a Reason that was cut to fit the reply.
const reasonCut = "… (the function's log has the rest)"

// reason is the failure CloudFormation shows in the stack's events: the
// error's text, which replyBody cuts to fit the reply.
func reason(err error) string { return err.Error() }

// replyBody marshals resp, cutting its Reason (at a character boundary,
// with reasonCut) so that the JSON body fits maxReply bytes: escaping can
// make the body longer than the text.
func replyBody(resp *cfn.Response) ([]byte, error) {
	body, err := json.Marshal(resp)
	if err != nil || len(body) <= maxReply {
		return body, err
	}
	full := []rune(resp.Reason)
	defer func(r string) { resp.Reason = r }(resp.Reason)
	lo, hi := 0, len(full) // the longest prefix that fits is in [lo, hi)
	var fit []byte
	for lo < hi {
		mid := (lo + hi + 1) / 2
		resp.Reason = string(full[:mid]) + reasonCut
		b, err := json.Marshal(resp)
		if err != nil {
			return nil, err
		}
		if len(b) <= maxReply {
			lo, fit = mid, b
		} else {
			hi = mid - 1
		}
	}
	if fit == nil {
		resp.Reason = reasonCut
		if fit, err = json.Marshal(resp); err != nil {
			return nil, err
		}
		if len(fit) > maxReply {
			return nil, fmt.Errorf("the reply is %d bytes without its reason, over CloudFormation's %d", len(fit), maxReply)
		}
	}
	return fit, nil
}
