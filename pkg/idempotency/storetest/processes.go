package storetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// The environment through which the Processes part talks to its
// workers.
const (
	envWorkerBatch = "ICHIDO_TEST_BATCH_FILE"
	envWorkerStart = "ICHIDO_TEST_BATCH_START"
	envWorkerStore = "ICHIDO_TEST_STORE_URL"
	envWorkerName  = "ICHIDO_TEST_FUNCTION_NAME"
	workerReady    = "ICHIDO-WORKER-READY"
	workerResult   = "ICHIDO-WORKER-RESULT "
)

// workerReport is what one worker process did with the batch.
type workerReport struct {
	Ran    []string `json:"ran"`
	Failed []string `json:"failed"`
}

// runBatchAcrossProcesses starts n operating-system processes of the
// running test binary, each running the test named workerTest (which calls
// BatchWorker), and has all of them handle the same SQS batch at the same
// moment through SQSHandler on the store at storeURL. It then checks that
// every record ran exactly once across all processes (a process that finds
// a record in progress elsewhere reports it failed; one that finds it done
// skips it), and that redelivering the batch through newStore's store runs
// none of them again.
func runBatchAcrossProcesses(t *testing.T, n int, workerTest, storeURL string, newStore func(t *testing.T, url string) idemstore.Store) {
	t.Helper()
	dir := t.TempDir()
	var batch events.SQSEvent
	for i := range 24 {
		batch.Records = append(batch.Records, sqsMessage(fmt.Sprintf(`{"n":%d}`, i)))
	}
	raw, err := json.Marshal(batch)
	require.NoError(t, err)
	batchFile := filepath.Join(dir, "batch.json")
	require.NoError(t, os.WriteFile(batchFile, raw, 0o600))
	startFile := filepath.Join(dir, "start")
	name := "batch-" + uuid.NewString()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type worker struct {
		cmd    *exec.Cmd
		out    *bufio.Scanner
		stderr strings.Builder
	}
	workers := make([]*worker, n)
	for i := range workers {
		w := &worker{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^"+workerTest+"$", "-test.count=1")}
		w.cmd.Env = append(os.Environ(),
			envWorkerBatch+"="+batchFile, envWorkerStart+"="+startFile,
			envWorkerStore+"="+storeURL, envWorkerName+"="+name)
		w.cmd.Stderr = &w.stderr
		stdout, err := w.cmd.StdoutPipe()
		require.NoError(t, err)
		w.out = bufio.NewScanner(stdout)
		w.out.Buffer(make([]byte, 1<<20), 1<<20)
		require.NoError(t, w.cmd.Start())
		workers[i] = w
	}
	// Wait until every worker is ready, then start them together.
	for i, w := range workers {
		ready := false
		for !ready && w.out.Scan() {
			ready = w.out.Text() == workerReady
		}
		require.True(t, ready, "worker %d never got ready: %s", i, w.stderr.String())
	}
	require.NoError(t, os.WriteFile(startFile, nil, 0o600))

	var mu sync.Mutex
	ran := map[string]int{}
	failed := map[string]int{}
	var wg sync.WaitGroup
	reports := make([]error, n)
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var report *workerReport
			for w.out.Scan() {
				if line, ok := strings.CutPrefix(w.out.Text(), workerResult); ok {
					report = &workerReport{}
					if err := json.Unmarshal([]byte(line), report); err != nil {
						reports[i] = err
					}
				}
			}
			if err := w.cmd.Wait(); err != nil {
				reports[i] = fmt.Errorf("worker %d: %w: %s", i, err, w.stderr.String())
				return
			}
			if report == nil {
				reports[i] = fmt.Errorf("worker %d wrote no result: %s", i, w.stderr.String())
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range report.Ran {
				ran[id]++
			}
			for _, id := range report.Failed {
				failed[id]++
			}
		}()
	}
	wg.Wait()
	for _, err := range reports {
		require.NoError(t, err)
	}

	inProgress := 0
	for _, m := range batch.Records {
		require.Equal(t, 1, ran[m.MessageId], "message %s ran %d times across %d processes", m.MessageId, ran[m.MessageId], n)
		inProgress += failed[m.MessageId]
	}
	t.Logf("%d records across %d processes: each ran once; %d times a process found a record in progress elsewhere and reported it failed", len(batch.Records), n, inProgress)

	// SQS redelivers what was reported failed: nothing runs again.
	store := newStore(t, storeURL)
	var again []string
	h, err := idempotency.SQSHandler(func(_ context.Context, m events.SQSMessage) error {
		again = append(again, m.MessageId)
		return nil
	}, idempotency.FunctionConfig[events.SQSMessage]{Store: store, Name: name, Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}})
	require.NoError(t, err)
	resp, err := h(context.Background(), batch)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Empty(t, again, "a redelivered record that already ran is skipped")
}

// BatchWorker is the body of the worker test that the Processes part
// starts; run as an ordinary test it skips. It builds its store from the
// URL it is given (newStore), handles the batch once its start signal
// appears, and reports what it ran and what it reported failed.
func BatchWorker(t *testing.T, newStore func(t *testing.T, url string) idemstore.Store) {
	batchFile := os.Getenv(envWorkerBatch)
	if batchFile == "" {
		t.Skip("runs only as a worker process of the Processes part")
	}
	raw, err := os.ReadFile(batchFile)
	require.NoError(t, err)
	var batch events.SQSEvent
	require.NoError(t, json.Unmarshal(raw, &batch))
	store := newStore(t, os.Getenv(envWorkerStore))

	var ran []string
	h, err := idempotency.SQSHandler(func(_ context.Context, m events.SQSMessage) error {
		ran = append(ran, m.MessageId)
		time.Sleep(2 * time.Millisecond) // hold the claim while the others try
		return nil
	}, idempotency.FunctionConfig[events.SQSMessage]{
		Store: store,
		Name:  os.Getenv(envWorkerName),
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	require.NoError(t, err)

	fmt.Println(workerReady)
	start := os.Getenv(envWorkerStart)
	for {
		if _, err := os.Stat(start); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := h(context.Background(), batch)
	if err != nil {
		require.ErrorIs(t, err, idempotency.ErrBatchFailed)
	}
	report := workerReport{Ran: ran, Failed: failedIDs(resp)}
	line, err := json.Marshal(report)
	require.NoError(t, err)
	fmt.Println(workerResult + string(line))
}
