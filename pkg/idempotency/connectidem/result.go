package connectidem

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/internal/rpcidem"
)

// anyURLPrefix heads the type URL of an error detail, as gRPC sends it.
const anyURLPrefix = "type.googleapis.com/"

// request is a call's request message in protobuf's deterministic
// encoding, whatever the codec on the wire, for its fingerprint.
func request(procedure string, req connect.AnyRequest) ([]byte, error) {
	m, ok := req.Any().(proto.Message)
	if !ok {
		return nil, fmt.Errorf("the request of %s is a %T, not a protobuf message", procedure, req.Any())
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// encode encodes the answer of the run that called the handler, to keep
// it: its error as a google.rpc.Status, or its response message.
func encode(resp connect.AnyResponse, err error) (rpcidem.Answer, error) {
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			return rpcidem.Answer{}, fmt.Errorf("the error %T is not a *connect.Error", err)
		}
		st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
		for _, d := range ce.Details() {
			st.Details = append(st.Details, &anypb.Any{TypeUrl: anyURLPrefix + d.Type(), Value: d.Bytes()})
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
		if err != nil {
			return rpcidem.Answer{}, err
		}
		return rpcidem.Answer{Status: b}, nil
	}
	m, ok := resp.Any().(proto.Message)
	if !ok {
		return rpcidem.Answer{}, fmt.Errorf("the response %T is not a protobuf message", resp.Any())
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return rpcidem.Answer{}, err
	}
	return rpcidem.Answer{Type: string(m.ProtoReflect().Descriptor().FullName()), Message: b}, nil
}

// errReplay is the error of a kept answer that cannot be replayed (its
// message type is not linked into this program).
func errReplay() error {
	return connect.NewError(connect.CodeInternal, errors.New("idempotency: the stored response of this call cannot be replayed"))
}

// replayed is the message of a replayed response: a new message of the
// kept type, which is what proto.Marshal, protojson and every codec built
// on protobuf reflection see. Connect's generics cannot name the handler's
// *connect.Response[T] at run time, so the response holds it behind this
// wrapper.
type replayed struct{ proto.Message }

// replay returns a kept answer, marked with the replay header: a new
// message of the kept type, or the kept error.
func replay(a rpcidem.Answer, types protoregistry.MessageTypeResolver) (connect.AnyResponse, error) {
	if a.Status != nil {
		var st spb.Status
		if err := proto.Unmarshal(a.Status, &st); err != nil || st.GetCode() == 0 {
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
	if a.Type == "" {
		return nil, errReplay()
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(a.Type))
	if err != nil {
		return nil, errReplay()
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.Message, m); err != nil {
		return nil, errReplay()
	}
	resp := connect.NewResponse(&replayed{m})
	resp.Header().Set(idempotency.ReplayedHeader, "true")
	return resp, nil
}
