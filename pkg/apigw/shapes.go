package apigw

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// IAMIdentity is the AWS principal that signed a request (SigV4), as a
// Lambda Function URL with AuthType AWS_IAM reports it.
type IAMIdentity struct {
	// AccountID is the caller's AWS account.
	AccountID string
	// UserARN is the caller's ARN (a user, or an assumed role's session).
	UserARN string
	// UserID is the principal's unique id (AIDA…, or AROA…:session).
	UserID string
	// CallerID is the caller's id as IAM gives it.
	CallerID string
	// AccessKey is the access key the request was signed with.
	AccessKey string
}

// fromFunctionURL is a Lambda Function URL request: the HTTP API 2.0 shape,
// with the caller's IAM identity when the URL's AuthType is AWS_IAM.
func fromFunctionURL(r events.LambdaFunctionURLRequest) Request {
	v2 := events.APIGatewayV2HTTPRequest{
		RawPath:         r.RawPath,
		RawQueryString:  r.RawQueryString,
		Headers:         r.Headers,
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
	}
	v2.RequestContext.HTTP.Method = r.RequestContext.HTTP.Method
	v2.RequestContext.RequestID = r.RequestContext.RequestID
	out := fromV2(v2)
	if a := r.RequestContext.Authorizer; a != nil && a.IAM != nil {
		out.IAM = &IAMIdentity{
			AccountID: a.IAM.AccountID,
			UserARN:   a.IAM.UserARN,
			UserID:    a.IAM.UserID,
			CallerID:  a.IAM.CallerID,
			AccessKey: a.IAM.AccessKey,
		}
	}
	return out
}

// fromALB is an Application Load Balancer target group request. The load
// balancer passes the query string's names and values as the client wrote
// them, still percent-encoded; they are decoded here (RawQuery rebuilds the
// query from them, names sorted, which is all the fingerprint needs). The
// headers are those of "multiValueHeaders" when the target group has
// multi-value headers on, else of "headers". An ALB has no request id and
// no authorizer: its OIDC or Cognito authentication reaches the target as
// x-amzn-oidc-* headers.
func fromALB(r events.ALBTargetGroupRequest) Request {
	out := Request{
		Version:         1,
		Method:          strings.ToUpper(r.HTTPMethod),
		Path:            r.Path,
		Headers:         map[string][]string{},
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
	}
	query := r.MultiValueQueryStringParameters
	if len(query) == 0 && len(r.QueryStringParameters) > 0 {
		query = make(map[string][]string, len(r.QueryStringParameters))
		for name, value := range r.QueryStringParameters {
			query[name] = []string{value}
		}
	}
	names := make([]string, 0, len(query))
	for name := range query {
		names = append(names, name)
	}
	slices.Sort(names)
	var raw strings.Builder
	for _, name := range names {
		for _, value := range query[name] {
			if raw.Len() > 0 {
				raw.WriteByte('&')
			}
			raw.WriteString(name)
			raw.WriteByte('=')
			raw.WriteString(value)
		}
	}
	out.RawQuery = raw.String()
	out.Query = ParseRawQuery(out.RawQuery)
	addHeaders(out.Headers, r.Headers, r.MultiValueHeaders)
	return out
}

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
