package dynamostore_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

// wire is an HTTP client for the SDK that records the operation of every
// request it sends (X-Amz-Target, without the API version) and may change
// each reply before the SDK reads it.
type wire struct {
	base    *http.Client
	mu      sync.Mutex
	ops     []string
	rewrite func(op string, resp *http.Response)
}

func (w *wire) Do(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	if i := strings.IndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	w.mu.Lock()
	w.ops = append(w.ops, op)
	rewrite := w.rewrite
	w.mu.Unlock()
	resp, err := w.base.Do(req)
	if err == nil && rewrite != nil {
		rewrite(op, resp)
	}
	return resp, err
}

// take returns the operations sent since the last call.
func (w *wire) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := w.ops
	w.ops = nil
	return ops
}

// setRewrite changes how replies are rewritten from now on.
func (w *wire) setRewrite(f func(op string, resp *http.Response)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rewrite = f
}

// wiredStore is a store on a new table whose client sends through a wire.
func wiredStore(t *testing.T, opts *dynamostore.Options) (*dynamostore.Store, *wire, *dynamodb.Client) {
	t.Helper()
	plain := dynamotest.NewClient(t)
	o := dynamostore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Table = newTable(t, plain, opts)
	w := &wire{base: &http.Client{}}
	client := dynamotest.NewClientAt(dynamotest.Endpoint(t), dynamotest.ClientOptions{HTTPClient: w})
	st, err := dynamostore.New(client, &o)
	require.NoError(t, err)
	return st, w, plain
}

// editJSON rewrites a reply's JSON body with edit. The body's CRC32 header
// goes, so that the SDK does not check the old checksum against the new
// body.
func editJSON(t *testing.T, resp *http.Response, edit func(body map[string]any)) {
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.Unmarshal(raw, &body))
	edit(body)
	raw, err = json.Marshal(body)
	require.NoError(t, err)
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	resp.Header.Set("Content-Length", strconv.Itoa(len(raw)))
	resp.Header.Del("X-Amz-Crc32")
}
