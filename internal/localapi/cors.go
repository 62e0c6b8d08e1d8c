package localapi

import (
	"net/http"
	"strconv"
	"strings"
)

// CORS is an HTTP API's CORS configuration (CorsConfiguration in the
// template). With it, the gateway answers browsers' preflight requests
// itself, before routing and before the authorizer, and adds the CORS
// headers to the functions' responses to requests that carry an allowed
// Origin.
type CORS struct {
	// AllowOrigins lists the allowed origins; "*" allows any. An origin not
	// listed gets no CORS headers.
	AllowOrigins []string
	// AllowMethods lists the methods a preflight allows; "*" allows any.
	AllowMethods []string
	// AllowHeaders lists the request headers a preflight allows; "*" allows
	// any. Browsers send Authorization, Content-Type and Idempotency-Key
	// only when listed here. Defaults to none.
	AllowHeaders []string
	// ExposeHeaders lists the response headers scripts may read (Location,
	// Idempotent-Replayed, Retry-After, ...). Defaults to none.
	ExposeHeaders []string
	// MaxAge is how many seconds a browser may cache a preflight answer.
	// Zero sends no Access-Control-Max-Age.
	MaxAge int
	// AllowCredentials sends Access-Control-Allow-Credentials: true.
	AllowCredentials bool
}

func (c *CORS) origin(r *http.Request) (string, bool) {
	origin := r.Header.Get("Origin")
	if c == nil || origin == "" {
		return "", false
	}
	for _, o := range c.AllowOrigins {
		if o == "*" {
			return "*", true
		}
		if strings.EqualFold(o, origin) {
			return origin, true
		}
	}
	return "", false
}

func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a preflight request as API Gateway does: 204, with
// the configured CORS headers when the origin is allowed.
func (c *CORS) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if origin, ok := c.origin(r); ok {
		h.Set("Access-Control-Allow-Origin", origin)
		if len(c.AllowMethods) > 0 {
			h.Set("Access-Control-Allow-Methods", strings.Join(c.AllowMethods, ","))
		}
		if len(c.AllowHeaders) > 0 {
			h.Set("Access-Control-Allow-Headers", strings.Join(c.AllowHeaders, ","))
		}
		if c.MaxAge > 0 {
			h.Set("Access-Control-Max-Age", strconv.Itoa(c.MaxAge))
		}
		if c.AllowCredentials {
			h.Set("Access-Control-Allow-Credentials", "true")
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// decorate adds the CORS headers of an actual (not preflight) request.
func (c *CORS) decorate(w http.ResponseWriter, r *http.Request) {
	origin, ok := c.origin(r)
	if !ok {
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	if len(c.ExposeHeaders) > 0 {
		h.Set("Access-Control-Expose-Headers", strings.Join(c.ExposeHeaders, ","))
	}
	if c.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
}

// corsWriter puts the configured CORS headers on a response just before
// its header is written, in place of any the function set: API Gateway
// ignores a backend's CORS headers when the API has a CORS configuration.
type corsWriter struct {
	http.ResponseWriter
	cors *CORS
	r    *http.Request
	done bool
}

func (c *corsWriter) WriteHeader(status int) {
	if !c.done {
		c.done = true
		h := c.Header()
		for name := range h {
			if strings.HasPrefix(name, "Access-Control-") {
				delete(h, name)
			}
		}
		c.cors.decorate(c.ResponseWriter, c.r)
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *corsWriter) Write(b []byte) (int, error) {
	if !c.done {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}
