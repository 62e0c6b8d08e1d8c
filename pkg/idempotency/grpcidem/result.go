package grpcidem

import (
	"encoding/json"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// result is what a protected call gives: on the run that called the
// handler, its own response or stored error (ran); on a replay, the
// record decoded.
type result struct {
	ran bool
	msg any
	err error
	rec record
}

// record is a call's answer as the store keeps it (as JSON, in the body of
// a Function's result): the response message's full name and its bytes,
// or a google.rpc.Status for a stored error. connectidem keeps the same.
type record struct {
	// Type is the response message's full name ("google.protobuf.Struct").
	Type string `json:"type,omitempty"`
	// Message is the response in protobuf's deterministic encoding.
	Message []byte `json:"message,omitempty"`
	// Status is a stored error, a google.rpc.Status in protobuf's encoding.
	Status []byte `json:"status,omitempty"`
}

// MarshalJSON encodes the answer of the run that called the handler. A
// response that is not a protobuf message cannot be kept: Function then
// completes the record as not kept, and a repeat is refused.
func (r result) MarshalJSON() ([]byte, error) {
	var rec record
	if r.err != nil {
		st, ok := status.FromError(r.err)
		if !ok {
			return nil, fmt.Errorf("the error %T is not a gRPC status", r.err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(st.Proto())
		if err != nil {
			return nil, err
		}
		rec.Status = b
	} else {
		m, ok := r.msg.(proto.Message)
		if !ok {
			return nil, fmt.Errorf("the response %T is not a protobuf message", r.msg)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		rec.Type, rec.Message = string(m.ProtoReflect().Descriptor().FullName()), b
	}
	return json.Marshal(rec)
}

// UnmarshalJSON decodes a stored answer for a replay.
func (r *result) UnmarshalJSON(b []byte) error {
	*r = result{}
	return json.Unmarshal(b, &r.rec)
}

// errReplay is the Internal status of a stored answer that cannot be
// replayed (its message type is not linked into this program).
var errReplay = status.Error(codes.Internal, "idempotency: the stored response of this call cannot be replayed")

// replay returns the stored answer: a new message of the stored type,
// or the stored status.
func (r result) replay(types protoregistry.MessageTypeResolver) (any, error) {
	if r.rec.Status != nil {
		var p spb.Status
		if err := proto.Unmarshal(r.rec.Status, &p); err != nil || p.GetCode() == int32(codes.OK) {
			return nil, errReplay
		}
		return nil, status.FromProto(&p).Err()
	}
	if r.rec.Type == "" {
		return nil, errReplay
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(r.rec.Type))
	if err != nil {
		return nil, errReplay
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.rec.Message, m); err != nil {
		return nil, errReplay
	}
	return m, nil
}

// codeOf is the code of a handler's error: that of the gRPC status it
// holds, Unknown for any other error.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unknown
}

// handlerError carries a handler's error that was not stored through
// Function, so that the caller gets it unchanged.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// asHandlerError returns the handler's own error that err carries.
func asHandlerError(err error) (error, bool) {
	var h *handlerError
	if errors.As(err, &h) {
		return h.err, true
	}
	return nil, false
}
