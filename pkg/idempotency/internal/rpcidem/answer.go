package rpcidem

import "encoding/json"

// Answer is a call's answer as the store keeps it (as JSON, in the body of
// Function's result): the response message's full name and its bytes, or
// a google.rpc.Status for a stored error. Both adapters keep the same, so
// either replays what the other kept.
type Answer struct {
	// Type is the response message's full name ("google.protobuf.Struct").
	Type string `json:"type,omitempty"`
	// Message is the response in protobuf's deterministic encoding.
	Message []byte `json:"message,omitempty"`
	// Status is a stored error, a google.rpc.Status in protobuf's
	// deterministic encoding.
	Status []byte `json:"status,omitempty"`
}

// Result is what a protected call gives: on the run that called the
// handler (Ran), its own response or error; on a replay, the kept Answer.
type Result[Resp any] struct {
	// Ran reports that this call ran the handler: Response and Err are
	// what it answered, to pass on unchanged.
	Ran      bool
	Response Resp
	Err      error
	// Replay is the answer kept by the call that ran, when Ran is false.
	Replay Answer

	// encode is Framework.Encode, set on the run that called the handler.
	encode func(Resp, error) (Answer, error)
}

// MarshalJSON encodes the answer of the run that called the handler. An
// answer that does not encode (a response that is not a protobuf message)
// cannot be kept: Function then completes the record as not kept, and a
// repeat is refused.
func (r Result[Resp]) MarshalJSON() ([]byte, error) {
	a, err := r.encode(r.Response, r.Err)
	if err != nil {
		return nil, err
	}
	return json.Marshal(a)
}

// UnmarshalJSON decodes a kept answer for a replay.
func (r *Result[Resp]) UnmarshalJSON(b []byte) error {
	*r = Result[Resp]{}
	return json.Unmarshal(b, &r.Replay)
}
