module github.com/ichido/ichido/pkg/idempotency/redisstore

go 1.26.0

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/google/uuid v1.6.0
	github.com/ichido/ichido/pkg v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
