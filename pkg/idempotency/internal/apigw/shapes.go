package apigw

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// toALB builds an ALB target group response. It carries both header
// forms: "headers" (one value per name, several joined with ", ", the last
// cookie only) and "multiValueHeaders" (every value, every cookie); the load
// balancer reads the one its target group's multi-value setting names. The
// status description ALB requires is the code and its reason phrase.
func toALB(resp Response) events.ALBTargetGroupResponse {
	out := events.ALBTargetGroupResponse{
		StatusCode:        resp.StatusCode,
		StatusDescription: strings.TrimSpace(strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)),
		Body:              resp.Body,
		IsBase64Encoded:   resp.IsBase64Encoded,
	}
	if len(resp.Headers) > 0 {
		out.Headers = make(map[string]string, len(resp.Headers))
		out.MultiValueHeaders = make(map[string][]string, len(resp.Headers))
		for name, values := range resp.Headers {
			out.MultiValueHeaders[name] = append([]string(nil), values...)
			if http.CanonicalHeaderKey(name) == setCookie {
				out.Headers[name] = values[len(values)-1]
				continue
			}
			out.Headers[name] = strings.Join(values, ", ")
		}
	}
	return out
}
