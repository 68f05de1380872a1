// SPDX-License-Identifier: Apache-2.0

// A read-only OCI distribution registry for the stand-ins, reached through an HTTPS proxy: the
// suite names ghcr.io and registry.k8s.io, so its resolver (containerd's remotes/docker, with
// Go's ProxyFromEnvironment) sends CONNECT ghcr.io:443 to HTTPS_PROXY. The proxy answers each
// tunnel with TLS of its own, a certificate for that host signed by a CA made for the run, and
// serves the registry inside; the suite's process alone trusts the CA (SSL_CERT_FILE), so nothing
// on the host changes.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	digest "github.com/opencontainers/go-digest"
)

// registry serves repositories keyed by host/name, the host taken from the request.
type registry struct {
	repos map[string]*repository
}

// distError answers in the distribution spec's error format, which containerd's resolver reads
// to tell a missing manifest from a broken registry.
func distError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}

func (g *registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		distError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
		return
	}
	if r.URL.Path == "/v2/" || r.URL.Path == "/v2" {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		_, _ = w.Write([]byte("{}"))
		return
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/")
	if !ok {
		distError(w, http.StatusNotFound, "NOT_FOUND", "not a registry path")
		return
	}
	var name, kind, ref string
	for _, k := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(rest, k); i > 0 {
			name, kind, ref = rest[:i], k, rest[i+len(k):]
			break
		}
	}
	repo := g.repos[host+"/"+name]
	if kind == "" || repo == nil {
		distError(w, http.StatusNotFound, "NAME_UNKNOWN", "no repository "+host+"/"+name)
		return
	}
	d, err := digest.Parse(ref)
	if err != nil && kind == "/manifests/" {
		d, ok = repo.tags[ref]
		if !ok {
			distError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "no tag "+ref)
			return
		}
		err = nil
	}
	b, found := repo.blobs[d]
	if err != nil || !found {
		code := "BLOB_UNKNOWN"
		if kind == "/manifests/" {
			code = "MANIFEST_UNKNOWN"
		}
		distError(w, http.StatusNotFound, code, "no "+ref)
		return
	}
	if kind == "/blobs/" {
		w.Header().Set("Content-Type", "application/octet-stream")
	} else {
		w.Header().Set("Content-Type", b.mediaType)
	}
	w.Header().Set("Docker-Content-Digest", d.String())
	w.Header().Set("Content-Length", strconv.Itoa(len(b.data)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(b.data)
	}
}

// authority is the run's CA: it signs a leaf per host on first use.
type authority struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shimwalk conformance stand-in CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &authority{cert: cert, key: key, leaves: map[string]*tls.Certificate{},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func (a *authority) leaf(host string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.leaves[host]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("key for %s: %w", host, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(len(a.leaves) + 2)),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	a.leaves[host] = c
	return c, nil
}

// proxy accepts CONNECT to the registry hosts on port 443 and refuses everything else, so that
// a test reaching for any other network fails as it would offline.
type proxy struct {
	ca    *authority
	hosts map[string]bool
	inner *http.Server
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// newProxy serves handler inside the tunnels; Close stops it and every tunnel.
func newProxy(ca *authority, handler http.Handler) *proxy {
	p := &proxy{ca: ca, hosts: map[string]bool{}, conns: make(chan net.Conn), done: make(chan struct{})}
	p.inner = &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if !p.hosts[h.ServerName] {
			return nil, fmt.Errorf("no certificate for %q", h.ServerName)
		}
		return ca.leaf(h.ServerName)
	}}
	go func() { _ = p.inner.Serve(tls.NewListener(tunnels{p}, tlsCfg)) }()
	return p
}

// tunnels is the inner server's listener: the proxy hands it each CONNECT's connection.
type tunnels struct{ p *proxy }

func (l tunnels) Accept() (net.Conn, error) {
	select {
	case c := <-l.p.conns:
		return c, nil
	case <-l.p.done:
		return nil, net.ErrClosed
	}
}
func (l tunnels) Close() error   { return nil }
func (l tunnels) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT to the stand-in registries", http.StatusMethodNotAllowed)
		return
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil || port != "443" || !p.hosts[host] {
		http.Error(w, "no stand-in registry for "+r.Host, http.StatusForbidden)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	_, err = rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err == nil {
		err = rw.Flush()
	}
	if err != nil {
		conn.Close()
		return
	}
	var c net.Conn = conn
	if rw.Reader.Buffered() > 0 {
		c = &bufferedConn{Conn: conn, r: rw.Reader}
	}
	select {
	case p.conns <- c:
	case <-p.done:
		conn.Close()
	}
}

// bufferedConn keeps what the client sent right after CONNECT and the proxy's reader took.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (p *proxy) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.inner.Close()
}

// standInServer is the registry behind the proxy, listening on addr.
type standInServer struct {
	URL    string // for HTTPS_PROXY
	CAPEM  []byte // for SSL_CERT_FILE
	outer  *http.Server
	proxy  *proxy
	served chan error
}

func serveStandIns(addr string, repos map[string]*repository) (*standInServer, error) {
	ca, err := newAuthority()
	if err != nil {
		return nil, err
	}
	p := newProxy(ca, &registry{repos: repos})
	for name := range repos {
		p.hosts[strings.SplitN(name, "/", 2)[0]] = true
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	s := &standInServer{URL: "http://" + ln.Addr().String(), CAPEM: ca.pem, proxy: p,
		outer: &http.Server{Handler: p, ReadHeaderTimeout: time.Minute}, served: make(chan error, 1)}
	go func() { s.served <- s.outer.Serve(ln) }()
	return s, nil
}

func (s *standInServer) Close() error {
	err := s.outer.Close()
	s.proxy.Close()
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
