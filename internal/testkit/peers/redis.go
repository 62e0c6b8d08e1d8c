// Package peers gives benchmarks the work that two peer libraries give a
// server on the paths ichido's stores take: the commands idemlease v1.1.0's
// Redis store sends. The library itself cannot be built here (the Go module
// proxy does not serve it), so its server work is reproduced from reading
// its source: the same commands, on a hash per record, in code of this
// package's own. What the library does around them in Go is not done, so
// a side built on this package is a lower bound of the library's time.
package peers

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reservation: when the record exists, its time to live and its
// fields are the answer (a replay, or a request in progress); otherwise
// the four fields of a reservation are written with the lease as the
// record's time to live.
var leaseReserve = redis.NewScript(`
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 1 then
  local ttl = redis.call('PTTL', rec)
  return {ttl, redis.call('HGETALL', rec)}
end
redis.call('HSET', rec, 'state', ARGV[1], 'token', ARGV[2], 'fp', ARGV[3], 'lease_exp_ms', ARGV[4])
redis.call('PEXPIRE', rec, ARGV[5])
return 'OK'
`)

// The completion: the record's token and state are checked, then three
// fields written and the time to live set to the record's.
var leaseComplete = redis.NewScript(`
local rec = KEYS[1]
local owner = redis.call('HGET', rec, 'token')
if not owner then return 'NOT_FOUND' end
if owner ~= ARGV[1] then return 'TOKEN_MISMATCH' end
if redis.call('HGET', rec, 'state') ~= '1' then return 'NOT_FOUND' end
redis.call('HSET', rec, 'state', '2', 'payload', ARGV[2], 'rec_exp_ms', ARGV[3])
redis.call('PEXPIRE', rec, ARGV[4])
return 'OK'
`)

// RedisLease sends idemlease's commands through c.
type RedisLease struct{ C *redis.Client }

// Reserve claims key for token; reserved is false when a record was
// there, whose fields came back instead (the replay's one call).
func (l RedisLease) Reserve(ctx context.Context, key, token string, fingerprint []byte, lease time.Duration) (reserved bool, err error) {
	until := time.Now().Add(lease)
	res, err := leaseReserve.Run(ctx, l.C, []string{key}, "1", token, fingerprint,
		strconv.FormatInt(until.UnixMilli(), 10), strconv.FormatInt(max(lease.Milliseconds(), 1), 10)).Result()
	if err != nil {
		return false, err
	}
	if s, ok := res.(string); ok && s == "OK" {
		return true, nil
	}
	if _, ok := res.([]any); ok {
		return false, nil
	}
	return false, fmt.Errorf("peers: the reservation answered %v", res)
}

// Complete writes payload to the record that token reserved.
func (l RedisLease) Complete(ctx context.Context, key, token string, payload []byte, ttl time.Duration) error {
	res, err := leaseComplete.Run(ctx, l.C, []string{key}, token, payload,
		strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10), strconv.FormatInt(ttl.Milliseconds(), 10)).Result()
	if err != nil {
		return err
	}
	if s, _ := res.(string); s != "OK" {
		return fmt.Errorf("peers: the completion answered %v", res)
	}
	return nil
}

// Payload frames a response as idemlease's HTTP layer keeps it: a version
// byte, then unsigned varints (the status, the number of header names,
// for each name its number of values), each string after its length,
// names sorted, the body last.
func Payload(status int, headers map[string]string, body string) []byte {
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b := binary.AppendUvarint([]byte{1}, uint64(status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(str(b, name), 1)
		b = str(b, headers[name])
	}
	return str(b, body)
}
