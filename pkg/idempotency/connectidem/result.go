package connectidem

import (
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ichido/ichido/pkg/idempotency"
)

// result is what a protected call gives: on the run that called the
// handler, its own response or stored error (ran); on a replay, the
// record decoded.
type result struct {
	ran  bool
	resp connect.AnyResponse
	err  error
	rec  record
}

// record is a call's answer as the store keeps it (as JSON, in the body of
// a Function's result): the response message's full name and its bytes,
// or a google.rpc.Status for a stored error. grpcidem keeps the same.
type record struct {
	// Type is the response message's full name ("google.protobuf.Struct").
	Type string `json:"type,omitempty"`
	// Message is the response in protobuf's deterministic encoding.
	Message []byte `json:"message,omitempty"`
	// Status is a stored error, a google.rpc.Status in protobuf's encoding.
	Status []byte `json:"status,omitempty"`
}

// anyURLPrefix heads the type URL of an error detail, as gRPC sends it.
const anyURLPrefix = "type.googleapis.com/"

// MarshalJSON encodes the answer of the run that called the handler. A
// response that is not a protobuf message cannot be kept: Function then
// completes the record as not kept, and a repeat is refused.
func (r result) MarshalJSON() ([]byte, error) {
	var rec record
	if r.err != nil {
		var ce *connect.Error
		if !errors.As(r.err, &ce) {
			return nil, fmt.Errorf("the error %T is not a *connect.Error", r.err)
		}
		st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
		for _, d := range ce.Details() {
			st.Details = append(st.Details, &anypb.Any{TypeUrl: anyURLPrefix + d.Type(), Value: d.Bytes()})
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
		if err != nil {
			return nil, err
		}
		rec.Status = b
	} else {
		m, ok := r.resp.Any().(proto.Message)
		if !ok {
			return nil, fmt.Errorf("the response %T is not a protobuf message", r.resp.Any())
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

// errReplay is the error of a stored answer that cannot be replayed (its
// message type is not linked into this program).
func errReplay() error {
	return connect.NewError(connect.CodeInternal, errors.New("idempotency: the stored response of this call cannot be replayed"))
}

// replayed is the message of a replayed response: a new message of the
// stored type, which is what proto.Marshal, protojson and every codec
// built on protobuf reflection see. Connect's generics cannot name the
// handler's *connect.Response[T] at run time, so the response holds it
// behind this wrapper.
type replayed struct{ proto.Message }

// replay returns the stored answer, marked with the replay header: a new
// message of the stored type, or the stored error.
func (r result) replay(types protoregistry.MessageTypeResolver) (connect.AnyResponse, error) {
	if r.rec.Status != nil {
		var st spb.Status
		if err := proto.Unmarshal(r.rec.Status, &st); err != nil || st.GetCode() == 0 {
			return nil, errReplay()
		}
		ce := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage()))
		for _, a := range st.GetDetails() {
			d, err := connect.NewErrorDetail(a)
			if err != nil {
				return nil, errReplay()
			}
			ce.AddDetail(d)
		}
		ce.Meta().Set(idempotency.ReplayedHeader, "true")
		return nil, ce
	}
	if r.rec.Type == "" {
		return nil, errReplay()
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(r.rec.Type))
	if err != nil {
		return nil, errReplay()
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.rec.Message, m); err != nil {
		return nil, errReplay()
	}
	resp := connect.NewResponse(&replayed{m})
	resp.Header().Set(idempotency.ReplayedHeader, "true")
	return resp, nil
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
