package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// SQSBatchHandler is the Lambda handler of an SQS event source mapping with
// ReportBatchItemFailures turned on.
type SQSBatchHandler = func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// SQSMessageID is the default key of SQSHandler: the message id, which SQS
// keeps across redeliveries of one message. A producer's retry of SendMessage,
// or an SNS topic fanning out to the queue twice, makes a new message with a
// new id. Key by the body (SQSBodyKey) to catch those too.
func SQSMessageID(_ context.Context, m events.SQSMessage) (string, error) {
	return m.MessageId, nil
}

// SQSBodyKey returns a key function for SQSHandler that decodes the body as
// JSON into T and returns key of it, typically the event's own id. A body
// that does not decode fails its record before anything runs (it goes to
// the dead-letter queue after the queue's maxReceiveCount).
func SQSBodyKey[T any](key func(T) string) func(context.Context, events.SQSMessage) (string, error) {
	return func(_ context.Context, m events.SQSMessage) (string, error) {
		var v T
		if err := json.Unmarshal([]byte(m.Body), &v); err != nil {
			return "", fmt.Errorf("the body of message %s is not a JSON %T: %w", m.MessageId, v, err)
		}
		return key(v), nil
	}
}

// SQSBody is a FunctionConfig.Payload for SQSHandler: the message body, so
// that a message whose key was seen with another body fails (ErrKeyReused)
// instead of being skipped as done.
func SQSBody(m events.SQSMessage) ([]byte, error) { return []byte(m.Body), nil }

// SQSHandler returns the handler of an SQS event source mapping that runs fn
// once per record and key. The key is cfg.Key, by default the message id. The
// handler answers with the records to retry, for ReportBatchItemFailures. A
// record whose fn fails or panics is failed, its key released. A record whose
// key completed before is skipped as done. A record in progress elsewhere is
// failed without running, as is one met while the store cannot be reached or
// after the invocation's context ended. On a FIFO queue, the first failure of
// a message group fails the group's later records in the batch.
//
// Records run in the batch's order. When none succeeds, the handler also
// returns ErrBatchFailed. So the batch is retried even where
// ReportBatchItemFailures was left off. Turn it on all the same, or a partly
// failed batch is deleted whole.
//
// cfg is that of Function, with cfg.Key defaulting to SQSMessageID.
// SQSHandler returns an error, and no handler, when fn is nil or cfg is
// invalid.
func SQSHandler(fn func(ctx context.Context, m events.SQSMessage) error, cfg FunctionConfig[events.SQSMessage]) (SQSBatchHandler, error) {
	if fn == nil {
		return nil, errors.New("idempotency: SQSHandler needs a function, got nil")
	}
	if cfg.Key == nil {
		cfg.Key = SQSMessageID
	}
	once, err := Function(func(ctx context.Context, m events.SQSMessage) (struct{}, error) {
		return struct{}{}, fn(ctx, m)
	}, cfg)
	if err != nil {
		return nil, err
	}
	settings := cfg.withDefaults()
	logger := settings.Logger
	// messageID is a message's id as the record-failed line shows it: a
	// digest with LogDigestSecret, since it is the default key.
	messageID := func(m events.SQSMessage) string {
		if settings.LogDigestSecret == nil {
			return m.MessageId
		}
		return observe.Digest(settings.LogDigestSecret, m.MessageId)
	}
	// errorText is err's text as that line shows it: with LogDigestSecret,
	// the message's key and scope, which fn's error may quote, are digests.
	errorText := func(ctx context.Context, m events.SQSMessage, err error) string {
		if settings.LogDigestSecret == nil {
			return err.Error()
		}
		key, _ := settings.Key(ctx, m)
		var scope string
		if settings.Scope != nil {
			scope, _ = settings.Scope(ctx, m)
		}
		return redact(settings.LogDigestSecret, err.Error(), key, scope, m.MessageId)
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		fail := func(m events.SQSMessage) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
		failedGroups := map[string]bool{}
		for _, m := range ev.Records {
			fifo := strings.HasSuffix(m.EventSourceARN, ".fifo")
			group := m.Attributes["MessageGroupId"]
			switch {
			case fifo && failedGroups[group]:
				fail(m)
				continue
			case ctx.Err() != nil:
				fail(m)
				continue
			}
			if err := runRecord(ctx, once, m); err != nil && !errors.Is(err, ErrResultNotKept) {
				logger.LogAttrs(ctx, recordLevel(err), "idempotency sqs record failed",
					slog.String("function", cfg.Name), slog.String("message_id", messageID(m)), slog.String("error", errorText(ctx, m, err)))
				fail(m)
				if fifo {
					failedGroups[group] = true
				}
			}
		}
		if n := len(ev.Records); n > 0 && len(resp.BatchItemFailures) == n {
			return resp, fmt.Errorf("%w (%d records)", ErrBatchFailed, n)
		}
		return resp, nil
	}, nil
}

// runRecord runs one record, turning a panic (after the core released the
// record's key) into an error, so that one bad record fails alone.
func runRecord(ctx context.Context, once func(context.Context, events.SQSMessage) (struct{}, error), m events.SQSMessage) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the record's function panicked: %v", v)
		}
	}()
	_, err = once(ctx, m)
	return err
}

// recordLevel is the level of a failed record's log line: a duplicate still
// in progress elsewhere is expected, anything else is an error.
func recordLevel(err error) slog.Level {
	if errors.Is(err, ErrInProgress) {
		return slog.LevelWarn
	}
	return slog.LevelError
}
