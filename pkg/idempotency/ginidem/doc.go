// Package ginidem puts the idempotency contract of package idempotency in a
// Gin router: the middleware is idempotency.Middleware, one engine with the
// same answers, adapted to gin's chain.
//
//	r := gin.New()
//	r.Use(gin.Recovery(), authenticate) // authenticate calls c.Set("user", subject)
//	mw, err := ginidem.Middleware(idempotency.Config{
//		Store:  store,
//		Subject: ginidem.SubjectFromKey("user"),
//	})
//	if err != nil {
//		return err // an invalid Config; the message names the field
//	}
//	r.Use(mw)
//	r.POST("/tasks", createTask)
//
// The user is what the authentication middleware keeps in gin's context:
// SubjectFromKey reads c.Get(key), SubjectFrom any accessor of the gin context.
// The middleware makes the gin context reachable from the request's
// context, where idempotency.Config.Subject reads; a user set with c.Set is
// otherwise not there. Mount the idempotency middleware after the one that
// sets the user; a request without one is refused with 401.
//
// The handlers after the middleware keep gin's writer and chain. c.JSON,
// c.Header, c.Status and c.AbortWithStatusJSON make the answer that is kept and
// replayed. A replay or refusal aborts the rest of the chain. A panic releases
// the key and goes on to gin's Recovery, which answers on the real response.
// Inside a handler, the run's Info is
// idempotency.FromContext(c.Request.Context()), and c.Request.Context() is the
// context to stop on: it is cancelled when the run's lease is lost. A protected
// request's response is buffered (see idempotency.Middleware): serve a stream
// or a hijacked connection on a method that is not protected.
//
// The package is a module of its own, so that gin reaches only the programs
// that import it.
package ginidem
