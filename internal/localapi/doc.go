// Package localapi emulates, on the loopback interface, the API Gateway HTTP
// API that fronts the task functions when they are deployed: it matches a
// request against the routes of template.yaml, answers for the JWT
// authorizer, turns the request into a payload format 2.0 event
// (events.APIGatewayV2HTTPRequest), calls the route's function in process
// and turns the function's events.APIGatewayV2HTTPResponse back into HTTP.
//
// What it reproduces, and where it departs from API Gateway:
//
//   - Routes are "METHOD /path" keys with {name} and greedy {name+}
//     variables, ANY and $default; the most specific route wins. A request
//     that matches no route gets API Gateway's 404 {"message":"Not Found"},
//     also when the path exists under another method.
//   - The JWT authorizer reads the Authorization header ("Bearer <JWT>" or
//     the bare token). No token, a token that is not a JWT, or one whose
//     exp or nbf rules it out gets API Gateway's 401
//     {"message":"Unauthorized"} before any function runs. The signature,
//     issuer and audience are NOT verified: the gateway trusts whatever
//     token it is given, which is why it only listens on a loopback
//     address (see Listen).
//   - Events carry lower-case header names with repeated headers joined by
//     commas, cookies split out of the Cookie header, the raw query string
//     and queryStringParameters (repeated ones comma-joined), path
//     parameters, a base64 body for content types that are not text, and a
//     requestContext with a request id, time, timeEpoch, the http block,
//     the routeKey and the authorizer's claims and scopes.
//   - Responses: statusCode, headers, multiValueHeaders, cookies (one
//     Set-Cookie each) and base64 bodies. A function error or panic, or a
//     status code outside 100–599, gets 500 {"message":"Internal Server
//     Error"}. Every response carries an apigw-requestid header.
//
// One access log line is written per request.
package localapi
