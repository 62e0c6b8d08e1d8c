// Package echoidem puts the idempotency contract of package idempotency in
// an Echo router: the middleware is idempotency.Middleware, one engine with
// the same answers, adapted to Echo's chain.
//
//	e := echo.New()
//	e.Use(middleware.Recover(), authenticate) // authenticate calls c.Set("user", subject)
//	mw, err := echoidem.Middleware(idempotency.Config{
//		Store:  store,
//		Subject: echoidem.SubjectFromKey("user"),
//	})
//	if err != nil {
//		return err // an invalid Config; the message names the field
//	}
//	e.Use(mw)
//	e.POST("/tasks", createTask)
//
// The user is what the authentication middleware keeps in Echo's context:
// SubjectFromKey reads c.Get(key), SubjectFrom any accessor of the Echo context
// (the subject of echo-jwt's token, for one). The middleware makes the Echo
// context reachable from the request's context, where
// idempotency.Config.Subject reads; a user set with c.Set is otherwise not
// there. Mount the idempotency middleware after the one that sets the user;
// a request without one is refused with 401.
//
// The handlers after the middleware keep Echo's response and chain. Their
// answer is kept and replayed, or released when it is a 5xx. It is made by
// c.JSON, headers set on c.Response() and the answer of a returned error. The
// Echo's HTTPErrorHandler writes that error (echo.NewHTTPError). A replay or
// refusal skips the handlers. A panic releases the key and goes on to Echo's
// Recover, which answers on the real response. Inside a handler, the run's Info
// is idempotency.FromContext(c.Request().Context()), and that context is the
// one to stop on: it is cancelled when the run's lease is lost. A protected
// request's response is buffered (see idempotency.Middleware): serve a stream
// or a WebSocket on a method that is not protected.
//
// The package is a module of its own, so that Echo reaches only the
// programs that import it.
package echoidem
