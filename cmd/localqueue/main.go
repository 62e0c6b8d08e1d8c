// Command localqueue feeds task events to the TaskActivityFunction's
// handler as SQS would deliver them from the task-events queue, on this
// machine with no AWS account: it is what `make feed` runs.
//
//	localqueue [-file events.jsonl] [-batch 10] [-max-receives 5] [-fifo]
//	           [-dead-letter .local/queue/dead-letter.jsonl] [-database-url URL]
//
// Each line of the input (standard input without -file) is one message
// body, normally a task event:
//
//	{"event_id":"e-1","user_id":"<uuid>","task_id":"<uuid>","kind":"created","occurred_at":"2026-12-01T09:00:00Z"}
//
// The queue gives each message an id and delivers up to -batch messages
// per invocation of the handler (the same code as the function's
// bootstrap, built from the environment as package taskfn builds it, run
// in this process). The records the handler reports in batchItemFailures
// come back in a later batch with their receive count raised, as after a
// visibility timeout; a message received -max-receives times goes to the
// dead-letter file, as the template's redrive policy sends it to the
// dead-letter queue. With -fifo the queue is FIFO, grouped by task_id. It
// prints one line per batch and a summary, and exits when the queue is
// empty.
package main

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/taskfn"
	"github.com/ichido/ichido/pkg/idempotency"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "localqueue:", err)
		os.Exit(1)
	}
}

// The ARNs the local queue's records carry; a FIFO queue's name ends in
// ".fifo", which is how the handler tells them apart.
const (
	standardARN = "arn:aws:sqs:local:000000000000:task-events"
	fifoARN     = "arn:aws:sqs:local:000000000000:task-events.fifo"
)

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("localqueue", flag.ContinueOnError)
	file := fs.String("file", "", "read message bodies, one per line, from this file instead of standard input")
	batch := fs.Int("batch", 10, "the most messages per batch (the event source mapping's BatchSize)")
	maxReceives := fs.Int("max-receives", 5, "receives before a message moves to the dead-letter file (the redrive policy's maxReceiveCount)")
	fifo := fs.Bool("fifo", false, "a FIFO queue: messages are grouped by the body's task_id")
	deadLetter := fs.String("dead-letter", filepath.Join(".local", "queue", "dead-letter.jsonl"), "where messages that exhausted their receives are appended")
	dbURL := fs.String("database-url", "", "DATABASE_URL for the handler (make feed passes the private PostgreSQL's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *batch < 1 || *batch > 10000 || *maxReceives < 1 {
		return errors.New("-batch must be 1 to 10000 and -max-receives at least 1")
	}
	in := stdin
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	q := &queue{arn: standardARN, fifo: *fifo}
	if *fifo {
		q.arn = fifoARN
	}
	if err := q.load(in); err != nil {
		return err
	}

	fns, err := taskfn.Build(ctx, func(name string) string {
		switch name {
		case "DB_AUTH":
			return "url"
		case "DATABASE_URL":
			if *dbURL != "" {
				return *dbURL
			}
		}
		return getenv(name)
	})
	if err != nil {
		return err
	}
	defer fns.Close()
	h, err := fns.ActivityHandler()
	if err != nil {
		return err
	}
	sum, err := q.drain(ctx, h, *batch, *maxReceives, stdout)
	if err != nil {
		return err
	}
	if len(sum.deadLettered) > 0 {
		if err := appendLines(*deadLetter, sum.deadLettered); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "done: %d messages, %d batches, %d redeliveries, %d to %s\n",
		sum.messages, sum.batches, sum.redeliveries, len(sum.deadLettered), *deadLetter)
	return nil
}

// message is one message waiting in the queue.
type message struct {
	id       string
	body     string
	group    string
	receives int
	sequence int
}

// queue is an in-memory stand-in for the task-events queue.
type queue struct {
	arn     string
	fifo    bool
	waiting []*message
	seq     int
}

// load reads one message body per non-empty line.
func (q *queue) load(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256<<10), 256<<10) // SQS's largest message
	for sc.Scan() {
		body := strings.TrimSpace(sc.Text())
		if body == "" {
			continue
		}
		q.send(body)
	}
	return sc.Err()
}

func (q *queue) send(body string) {
	q.seq++
	m := &message{id: uuid.NewString(), body: body, sequence: q.seq}
	if q.fifo {
		var ev struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal([]byte(body), &ev) // a body without one is its own group
		m.group = ev.TaskID
	}
	q.waiting = append(q.waiting, m)
}

// summary is what draining the queue did.
type summary struct {
	messages, batches, redeliveries int
	deadLettered                    []string
}

// drain delivers the waiting messages in batches until none is left. A
// message reported failed comes back until its receives run out: at the
// end of a standard queue, at the front of a FIFO one, so that a group's
// order holds.
func (q *queue) drain(ctx context.Context, h idempotency.SQSBatchHandler, size, maxReceives int, out io.Writer) (summary, error) {
	sum := summary{messages: len(q.waiting)}
	for len(q.waiting) > 0 {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		n := min(size, len(q.waiting))
		taken := q.waiting[:n]
		q.waiting = append([]*message(nil), q.waiting[n:]...)
		ev := events.SQSEvent{}
		for _, m := range taken {
			m.receives++
			ev.Records = append(ev.Records, q.record(m))
		}
		resp, err := h(ctx, ev)
		if err != nil && !errors.Is(err, idempotency.ErrBatchFailed) {
			return sum, err
		}
		sum.batches++
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var back []*message
		for _, m := range taken {
			switch {
			case !failed[m.id]:
			case m.receives >= maxReceives:
				sum.deadLettered = append(sum.deadLettered, m.body)
			default:
				back = append(back, m)
			}
		}
		sum.redeliveries += len(back)
		if q.fifo {
			// A group's failed messages come back before its later ones.
			q.waiting = append(back, q.waiting...)
		} else {
			q.waiting = append(q.waiting, back...)
		}
		fmt.Fprintf(out, "batch %d: %d records, %d failed, %d to be redelivered\n", sum.batches, n, len(failed), len(back))
	}
	return sum, nil
}

// record is m as the event source mapping delivers it.
func (q *queue) record(m *message) events.SQSMessage {
	sum := md5.Sum([]byte(m.body))
	r := events.SQSMessage{
		MessageId:      m.id,
		ReceiptHandle:  m.id + "-" + strconv.Itoa(m.receives),
		Body:           m.body,
		Md5OfBody:      hex.EncodeToString(sum[:]),
		EventSource:    "aws:sqs",
		EventSourceARN: q.arn,
		AWSRegion:      "local",
		Attributes:     map[string]string{"ApproximateReceiveCount": strconv.Itoa(m.receives)},
	}
	if q.fifo {
		r.Attributes["MessageGroupId"] = m.group
		r.Attributes["SequenceNumber"] = strconv.Itoa(m.sequence)
	}
	return r
}

func appendLines(path string, lines []string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(f, l); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
