package grpcidem

import (
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/ichido/ichido/pkg/idempotency/internal/rpcidem"
)

// request is a call's request in protobuf's deterministic encoding, for
// its fingerprint.
func request(method string, req any) ([]byte, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("the request of %s is a %T, not a protobuf message", method, req)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// encode encodes the answer of the run that called the handler, to keep
// it: its status, or its response message.
func encode(resp any, err error) (rpcidem.Answer, error) {
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			return rpcidem.Answer{}, fmt.Errorf("the error %T is not a gRPC status", err)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(st.Proto())
		if err != nil {
			return rpcidem.Answer{}, err
		}
		return rpcidem.Answer{Status: b}, nil
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return rpcidem.Answer{}, fmt.Errorf("the response %T is not a protobuf message", resp)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return rpcidem.Answer{}, err
	}
	return rpcidem.Answer{Type: string(m.ProtoReflect().Descriptor().FullName()), Message: b}, nil
}

// errReplay is the Internal status of a kept answer that cannot be
// replayed (its message type is not linked into this program).
var errReplay = status.Error(codes.Internal, "idempotency: the stored response of this call cannot be replayed")

// replay returns a kept answer: a new message of the kept type, or the
// kept status.
func replay(a rpcidem.Answer, types protoregistry.MessageTypeResolver) (any, error) {
	if a.Status != nil {
		var p spb.Status
		if err := proto.Unmarshal(a.Status, &p); err != nil || p.GetCode() == int32(codes.OK) {
			return nil, errReplay
		}
		return nil, status.FromProto(&p).Err()
	}
	if a.Type == "" {
		return nil, errReplay
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(a.Type))
	if err != nil {
		return nil, errReplay
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.Message, m); err != nil {
		return nil, errReplay
	}
	return m, nil
}
