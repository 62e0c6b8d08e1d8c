package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/redis/go-redis/v9"
)

var _ idemstore.Admin = (*Store)(nil)

// Get implements idemstore.Admin: one GET. A record whose ExpiresAt has passed by this process's
// clock counts as absent, although Redis may keep it until its PX ends.
func (s *Store) Get(ctx context.Context, userID, key string) (idemstore.Record, bool, error) {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return idemstore.Record{}, false, storeError(ctx, "get", err)
	}
	rec, ok, err := s.get(ctx, s.Key(userID, key), userID, key)
	if err != nil {
		return idemstore.Record{}, false, storeError(ctx, "get", err)
	}
	return rec, ok, nil
}

func (s *Store) get(ctx context.Context, redisKey, userID, key string) (idemstore.Record, bool, error) {
	v, err := s.client.Get(ctx, redisKey).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return idemstore.Record{}, false, nil
	case err != nil:
		return idemstore.Record{}, false, err
	}
	rec, err := decodeRecord(userID, key, v)
	if err != nil {
		return idemstore.Record{}, false, err
	}
	rec = detach(rec)
	return rec, rec.ExpiresAt.After(time.Now()), nil
}

// detach copies the strings of a decoded record out of the reply's memory,
// since a listed record outlives the reply.
func detach(rec idemstore.Record) idemstore.Record {
	rec.Owner, rec.Fingerprint = strings.Clone(rec.Owner), strings.Clone(rec.Fingerprint)
	if rec.Response != nil {
		resp := *rec.Response
		resp.Body = strings.Clone(resp.Body)
		headers := make(map[string]string, len(resp.Headers))
		for k, v := range resp.Headers {
			headers[strings.Clone(k)] = strings.Clone(v)
		}
		resp.Headers = headers
		rec.Response = &resp
	}
	return rec
}

// List implements idemstore.Admin with a SCAN over the store's prefix, and the
// user when q names one. It scans every primary, since a record's hash tag is
// its whole identity and one user's records spread over every slot. Then it
// makes a GET per key found. Only the store's own keys are read: the prefix
// exactly, then "{", a user id, ":", a key and "}". Each id is a lower-case
// UUID. So a key of a prefix that starts with this one is not matched, even
// with braces of its own. A value that is not a record is left out. It reads
// every record that matches, to sort them newest first: it is for operators,
// never for a request's path.
func (s *Store) List(ctx context.Context, q idemstore.ListQuery) ([]idemstore.Record, error) {
	pattern := globEscape(s.prefix) + "{" + idGlob + ":" + idGlob + "}"
	if q.UserID != "" {
		if !idemstore.IsID(q.UserID) {
			return nil, storeError(ctx, "list", fmt.Errorf("the user id %.80q is %w", q.UserID, idemstore.ErrNotID))
		}
		pattern = globEscape(s.prefix+"{"+q.UserID+":") + idGlob + "}"
	}
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var found []string
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, found...)
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = errors.New("listing needs a *redis.Client or a *redis.ClusterClient")
	}
	if err != nil {
		return nil, storeError(ctx, "list", err)
	}
	var out []idemstore.Record
	for _, k := range keys {
		userID, key, ok := s.parseKey(k)
		if !ok {
			continue
		}
		rec, live, err := s.get(ctx, k, userID, key)
		switch {
		case err != nil && undecodable(err):
			continue // not a record: another program's value under the prefix
		case err != nil:
			return nil, storeError(ctx, "list", err)
		}
		if live && (q.Status == "" || rec.Status == q.Status) {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b idemstore.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.UserID, b.UserID); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n := q.Limited(); len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// Delete implements idemstore.Admin: one DEL, whatever the record's
// state, owner or layout.
func (s *Store) Delete(ctx context.Context, userID, key string) (bool, error) {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return false, storeError(ctx, "delete", err)
	}
	n, err := s.client.Del(ctx, s.Key(userID, key)).Result()
	if err != nil {
		return false, storeError(ctx, "delete", err)
	}
	return n > 0, nil
}

// undecodable reports whether err says a value is not a record, rather
// than that the server could not be asked.
func undecodable(err error) bool {
	return errors.Is(err, errNotRecord) || redis.HasErrorPrefix(err, "WRONGTYPE")
}

// parseKey splits a record's Redis key into its user id and key, and
// reports whether it is this store's: the prefix exactly, then "{", a user
// id, ":", a key and "}", each id a lower-case UUID. The ids' fixed length
// makes what precedes them the prefix of the store that wrote the key.
func (s *Store) parseKey(redisKey string) (userID, key string, ok bool) {
	rest, ok := strings.CutPrefix(redisKey, s.prefix+"{")
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, "}")
	if !ok {
		return "", "", false
	}
	userID, key, ok = strings.Cut(rest, ":")
	return userID, key, ok && idemstore.IsID(userID) && idemstore.IsID(key)
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
