package dynamostore

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// The names of the response map's members. They are part of the item
// layout the package comment documents.
const (
	respStatus  = "status_code"
	respHeaders = "headers"
	respBody    = "body"
	respBase64  = "is_base64"
	respNotKept = "not_kept"
	respOrigin  = "origin"

	originTrace = "trace_id"
	originSpan  = "span_id"
	originAt    = "at"
)

// errNotRecord marks an item under the store's keys that is not a record
// of the layout this package writes.
var errNotRecord = errors.New("not an idempotency record")

func str(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }

func num(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// bytesOrString is s as a String when it is valid UTF-8 (readable in the
// console and by other tools), else as Binary, so that any byte replays.
func bytesOrString(s string) types.AttributeValue {
	if utf8.ValidString(s) {
		return str(s)
	}
	return &types.AttributeValueMemberB{Value: []byte(s)}
}

// micros is t in Unix microseconds, the precision the store keeps.
func micros(t time.Time) int64 { return t.UnixMicro() }

// epochSeconds is t in whole Unix seconds, rounded up, for the TTL
// attribute: DynamoDB deletes an item only once its TTL has passed, so
// rounding up never deletes a record early.
func epochSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// encodeResponse returns the response map of resp.
func encodeResponse(resp idemstore.Response) *types.AttributeValueMemberM {
	m := map[string]types.AttributeValue{
		respStatus: num(int64(resp.StatusCode)),
		respBody:   bytesOrString(resp.Body),
	}
	if len(resp.Headers) > 0 {
		h := make(map[string]types.AttributeValue, len(resp.Headers))
		for k, v := range resp.Headers {
			h[k] = bytesOrString(v)
		}
		m[respHeaders] = &types.AttributeValueMemberM{Value: h}
	}
	if resp.IsBase64Encoded {
		m[respBase64] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if notKeptOf(resp) {
		m[respNotKept] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if o := resp.Origin; o != nil {
		m[respOrigin] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			originTrace: bytesOrString(o.TraceID),
			originSpan:  bytesOrString(o.SpanID),
			originAt:    num(micros(o.At)),
		}}
	}
	return &types.AttributeValueMemberM{Value: m}
}

// decodeResponse reads a response map.
func decodeResponse(av types.AttributeValue) (*idemstore.Response, error) {
	m, ok := av.(*types.AttributeValueMemberM)
	if !ok {
		return nil, fmt.Errorf("%w: the response is a %T, not a map", errNotRecord, av)
	}
	resp := &idemstore.Response{}
	code, err := numberOf(m.Value, respStatus)
	if err != nil {
		return nil, err
	}
	if code < -1<<31 || code > 1<<31-1 {
		return nil, fmt.Errorf("%w: status code %d", errNotRecord, code)
	}
	resp.StatusCode = int(code)
	if resp.Body, err = textOf(m.Value[respBody], respBody); err != nil {
		return nil, err
	}
	if h, ok := m.Value[respHeaders]; ok {
		hm, ok := h.(*types.AttributeValueMemberM)
		if !ok {
			return nil, fmt.Errorf("%w: the headers are a %T, not a map", errNotRecord, h)
		}
		resp.Headers = make(map[string]string, len(hm.Value))
		for k, v := range hm.Value {
			if resp.Headers[k], err = textOf(v, "header "+k); err != nil {
				return nil, err
			}
		}
	}
	if resp.IsBase64Encoded, err = flagOf(m.Value, respBase64); err != nil {
		return nil, err
	}
	nk, err := flagOf(m.Value, respNotKept)
	if err != nil {
		return nil, err
	}
	setNotKept(resp, nk)
	if o, ok := m.Value[respOrigin]; ok {
		if resp.Origin, err = decodeOrigin(o); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// decodeOrigin reads a response's origin map.
func decodeOrigin(av types.AttributeValue) (*idemstore.Origin, error) {
	m, ok := av.(*types.AttributeValueMemberM)
	if !ok {
		return nil, fmt.Errorf("%w: the origin is a %T, not a map", errNotRecord, av)
	}
	o := &idemstore.Origin{}
	var err error
	if o.TraceID, err = textOf(m.Value[originTrace], "the origin's "+originTrace); err != nil {
		return nil, err
	}
	if o.SpanID, err = textOf(m.Value[originSpan], "the origin's "+originSpan); err != nil {
		return nil, err
	}
	if o.At, err = timeOf(m.Value, originAt); err != nil {
		return nil, err
	}
	return o, nil
}

// textOf reads a String or Binary value; a missing one is empty.
func textOf(av types.AttributeValue, what string) (string, error) {
	switch v := av.(type) {
	case nil:
		return "", nil
	case *types.AttributeValueMemberS:
		return v.Value, nil
	case *types.AttributeValueMemberB:
		return string(v.Value), nil
	default:
		return "", fmt.Errorf("%w: %s is a %T", errNotRecord, what, av)
	}
}

func flagOf(m map[string]types.AttributeValue, name string) (bool, error) {
	switch v := m[name].(type) {
	case nil:
		return false, nil
	case *types.AttributeValueMemberBOOL:
		return v.Value, nil
	default:
		return false, fmt.Errorf("%w: %s is a %T", errNotRecord, name, v)
	}
}

func numberOf(m map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%w: %s is missing or not a number", errNotRecord, name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", errNotRecord, name, err)
	}
	return n, nil
}

func stringOf(m map[string]types.AttributeValue, name string) (string, error) {
	v, ok := m[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", fmt.Errorf("%w: %s is missing or not a string", errNotRecord, name)
	}
	return v.Value, nil
}

func timeOf(m map[string]types.AttributeValue, name string) (time.Time, error) {
	n, err := numberOf(m, name)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(n).UTC(), nil
}

// ItemSize is the size of item in bytes as DynamoDB counts it against its item
// limit (MaxItemBytes) and for capacity. It adds up each attribute's name and
// value. A string counts its UTF-8 bytes and a binary its raw bytes. A Boolean
// or null counts 1 byte. A map or list counts 3 bytes plus 1 for each element.
// A number counts 1 byte per two significant digits, plus 1. DynamoDB calls the
// number's size approximate; ItemSize counts every digit of the number's text,
// which is never less. A write of an item costs one write unit per KB of it,
// rounded up; a strongly consistent read one read unit per 4 KB.
func ItemSize(item map[string]types.AttributeValue) int {
	return itemSize(item)
}

func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + sizeOf(v)
	}
	return n
}

func sizeOf(av types.AttributeValue) int {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return (len(v.Value)+1)/2 + 1
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + sizeOf(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += sizeOf(e) + 1
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += (len(e)+1)/2 + 1
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	default:
		return 0
	}
}
