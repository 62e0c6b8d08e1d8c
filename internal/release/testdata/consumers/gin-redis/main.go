// A Gin API whose idempotency records live in Redis.
package main

import (
	"log"
	"net/http"
	"os"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/ginidem"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

func main() {
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()

	r := gin.New()
	r.Use(func(c *gin.Context) { // the authentication middleware
		if c.GetHeader("Authorization") == "Bearer alice-token" {
			c.Set("user", "alice")
		}
	})
	store, err := redisstore.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}
	mw, err := ginidem.Middleware(idempotency.Config{
		Store:   store,
		Subject: ginidem.SubjectFromKey("user"),
	})
	if err != nil {
		log.Fatal(err)
	}
	r.Use(mw)
	r.POST("/orders", func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"id": 1}) })
	log.Fatal(r.Run(":8080"))
}
