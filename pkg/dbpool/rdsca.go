package dbpool

import (
	"crypto/x509"
	_ "embed"
	"os"
	"sync"
)

// The values of Config.CA (DB_TLS_CA) that are not file paths.
const (
	// CASystem verifies the server with the system roots. On
	// provided.al2023 they include the Amazon Trust Services roots that sign
	// RDS Proxy's certificates. The default.
	CASystem = "system"
	// CARDS verifies the server with the Amazon RDS certificate authorities
	// built into this package (RDSRootCAs). They sign the certificates of
	// Aurora cluster and instance endpoints, and the system roots do not.
	CARDS = "rds"
)

//go:embed rds-ca-bundle.pem
var rdsBundle []byte

// RDSRootCAs returns a pool of the Amazon RDS root CAs of every commercial
// region: RSA2048 G1, RSA4096 G1 and ECC384 G1. They are as AWS publishes them
// in its global bundle, less those that have expired. The header of this
// package's rds-ca-bundle.pem says where they come from. Each call returns a
// new pool.
func RDSRootCAs() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rdsBundle)
	return pool
}

var rdsRoots = sync.OnceValue(RDSRootCAs)

// rootsFor returns the pool that verifies the server for ca: nil (the
// system roots) for CASystem or "", the RDS CAs for CARDS, else the
// certificates of the PEM file at path ca.
func rootsFor(ca string) (*x509.CertPool, error) {
	switch ca {
	case "", CASystem:
		return nil, nil
	case CARDS:
		return rdsRoots(), nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, configErr("DB_TLS_CA", "is %q, which cannot be read (%v): set %q, %q or the path of a PEM file of CA certificates", ca, err, CASystem, CARDS)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, configErr("DB_TLS_CA", "is %q, which holds no PEM certificate: set %q, %q or the path of a PEM file of CA certificates", ca, CASystem, CARDS)
	}
	return pool, nil
}
