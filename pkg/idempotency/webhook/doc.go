// Package webhook makes a webhook receiver handle each delivery once:
// idempotency.Middleware keyed by the delivery's id, after the delivery's
// signature is verified.
//
//	stripe, err := webhook.Stripe(secret, nil)
//	if err != nil {
//		return err // an empty or malformed secret
//	}
//	mw, err := webhook.Middleware(stripe, idempotency.Config{
//		Store: store,
//	})
//	if err != nil {
//		return err // an invalid Provider or Config; the message says which field
//	}
//	http.Handle("POST /webhooks/stripe", mw(handleStripeEvent))
//
// A delivery whose signature does not verify is answered with 401
// webhook_signature_invalid, and neither the store nor the handler sees it. A
// verified delivery without an id is refused with 400
// webhook_delivery_id_missing. A verified delivery runs the handler once per
// id. Its answer is kept when it is a 2xx, a 3xx, or a 4xx but 408, 409, 425
// and 429. A retry or redelivery of it gets that answer again. A 5xx, an error
// or a panic releases the id, so the provider's next retry runs the handler
// again. A retry that arrives while the first attempt still runs gets 409.
// Every provider here retries that later.
//
// The presets (Stripe, GitHub, Shopify, StandardWebhooks) know where each
// provider puts the id and how it signs. Each refuses an empty or short secret.
// The id is read from what the provider signs. Stripe's event id and Standard
// Webhooks' webhook-id are signed. GitHub and Shopify sign only the body, so
// their deliveries are keyed by the body's SHA-256. A Provider of your own
// gives its name, its id and a Verify hook. Records are scoped by
// Provider.Name, so the equal ids of two providers, or of two endpoints with
// names of their own, are two records.
//
// Records live for DefaultTTL (4 days) unless Config.TTL says otherwise:
// longer than the providers' retry windows.
//
//	provider           retries                                       id
//	Stripe             live mode: up to 3 days, exponential backoff  event "id" (body)
//	GitHub             none; redelivery on request (UI, REST API)    SHA-256 of the body
//	Shopify            8 times over 4 hours                          SHA-256 of the body
//	Standard Webhooks  the spec's example: 10 attempts over 75.6 h   webhook-id
package webhook
