package streamplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// keepaliveParams ping the replica in use when no data came for Time and drop it after Timeout without an
// answer: a stopped replica (SIGSTOP, a stalled VM) keeps its TCP connection open, and without pings every
// call would wait out its deadline there. grpc-go pings at most every 10 s; the coordinator accepts pings
// every second (the Python client pings every 2 s).
var keepaliveParams = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}

// Dial connects to a coordinator with the credentials the environment names, as the Python client finds
// them: STREAMPLANE_TOKEN (or the file STREAMPLANE_TOKEN_FILE names) is sent as `authorization: Bearer`;
// STREAMPLANE_TLS_CA turns TLS on (the CA of the coordinator's certificate), and STREAMPLANE_TLS_CERT with
// STREAMPLANE_TLS_KEY present a client certificate (mutual TLS). Without them the connection is plaintext.
//
// The target may list several replicas of one coordinator, comma-separated (`host:p1,host:p2,host:p3`): the
// connection then holds one live replica at a time and moves to another by itself when it goes away
// (pick_first over the list, as the Python client does). TLS checks the first address's host name.
func Dial(target string) (*grpc.ClientConn, error) {
	var replicas []string
	for _, address := range strings.Split(target, ",") {
		if address = strings.TrimSpace(address); address != "" {
			replicas = append(replicas, address)
		}
	}
	if len(replicas) == 0 {
		return nil, fmt.Errorf("no coordinator address in %q", target)
	}
	token := strings.TrimSpace(os.Getenv("STREAMPLANE_TOKEN"))
	if token == "" && os.Getenv("STREAMPLANE_TOKEN_FILE") != "" {
		raw, err := os.ReadFile(os.Getenv("STREAMPLANE_TOKEN_FILE"))
		if err != nil {
			return nil, fmt.Errorf("STREAMPLANE_TOKEN_FILE cannot be read: %w", err)
		}
		token = strings.TrimSpace(string(raw))
	}
	transport := insecure.NewCredentials()
	secure := false
	if ca, cert, key := os.Getenv("STREAMPLANE_TLS_CA"), os.Getenv("STREAMPLANE_TLS_CERT"), os.Getenv("STREAMPLANE_TLS_KEY"); ca != "" || cert != "" {
		config := &tls.Config{MinVersion: tls.VersionTLS12}
		if host, _, err := net.SplitHostPort(replicas[0]); err == nil && len(replicas) > 1 {
			config.ServerName = host
		}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("STREAMPLANE_TLS_CA cannot be read: %w", err)
			}
			config.RootCAs = x509.NewCertPool()
			if !config.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("STREAMPLANE_TLS_CA %s holds no PEM certificate", ca)
			}
		}
		if cert != "" || key != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("STREAMPLANE_TLS_CERT / STREAMPLANE_TLS_KEY cannot be loaded: %w", err)
			}
			config.Certificates = []tls.Certificate{pair}
		}
		transport, secure = credentials.NewTLS(config), true
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(transport), grpc.WithKeepaliveParams(keepaliveParams)}
	if token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer{token, secure}))
	}
	if len(replicas) > 1 {
		builder := manual.NewBuilderWithScheme("streamplane-replicas")
		state := resolver.State{}
		for _, address := range replicas {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: address})
		}
		builder.InitialState(state)
		options = append(options, grpc.WithResolvers(builder))
		target = "streamplane-replicas:///coordinator"
	}
	return grpc.NewClient(target, options...)
}

// bearer sends a token with every call (over plaintext only when the connection is, as on loopback).
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }
