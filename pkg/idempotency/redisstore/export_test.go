package redisstore

import "github.com/ichido/ichido/pkg/idempotency"

// DecodeRecord decodes a record value as the store reads it.
func DecodeRecord(v string) (idempotency.Record, error) { return decodeRecord("", "", v) }
