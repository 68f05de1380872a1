// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// standInClient is the suite's view: every request through the proxy, trusting only the run's CA.
func standInClient(t *testing.T, s *standInServer, trust bool) *http.Client {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if trust && !pool.AppendCertsFromPEM(s.CAPEM) {
		t.Fatal("CA PEM holds no certificate")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func serveForTest(t *testing.T) *standInServer {
	t.Helper()
	// Not the real busybox: the registry serves whatever bytes the layers hold.
	repos, err := build(standIns([]byte("\x7fELF stand-in busybox"), []string{"busybox", "sh", "sleep", "id"}))
	if err != nil {
		t.Fatal(err)
	}
	s, err := serveStandIns("127.0.0.1:0", repos)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// get fetches url and checks the status and, when want is a digest, that the body has it.
func get(t *testing.T, c *http.Client, url string, status int, want digest.Digest) []byte {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, status, body)
	}
	if want != "" && (digest.FromBytes(body) != want || resp.Header.Get("Docker-Content-Digest") != want.String()) {
		t.Fatalf("GET %s: body or header is not %s", url, want)
	}
	return body
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// layerFiles reads a gzipped layer into name -> header and content.
func layerFiles(t *testing.T, b []byte) (map[string]*tar.Header, map[string]string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	hdrs, data := map[string]*tar.Header{}, map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		hdrs[h.Name], data[h.Name] = h, string(c)
	}
}

func TestStandInsThroughTheProxy(t *testing.T) {
	s := serveForTest(t)
	c := standInClient(t, s, true)
	seen := map[digest.Digest]string{}
	for _, img := range standIns(nil, nil) {
		repo, tag, err := splitRef(img.ref)
		if err != nil {
			t.Fatal(err)
		}
		host, name, _ := strings.Cut(repo, "/")
		base := "https://" + host + "/v2/" + name
		var idx ocispec.Index
		decode(t, get(t, c, base+"/manifests/"+tag, http.StatusOK, ""), &idx)
		if idx.MediaType != ocispec.MediaTypeImageIndex || len(idx.Manifests) != len(standInPlatforms) {
			t.Fatalf("%s: index %+v", img.ref, idx)
		}
		for i, md := range idx.Manifests {
			if md.Platform == nil || platformString(*md.Platform) != platformString(standInPlatforms[i]) {
				t.Fatalf("%s: manifest %d has platform %v", img.ref, i, md.Platform)
			}
			var m ocispec.Manifest
			decode(t, get(t, c, base+"/manifests/"+md.Digest.String(), http.StatusOK, md.Digest), &m)
			var cfg ocispec.Image
			decode(t, get(t, c, base+"/blobs/"+m.Config.Digest.String(), http.StatusOK, m.Config.Digest), &cfg)
			if len(cfg.RootFS.DiffIDs) != len(m.Layers) || cfg.Architecture != md.Platform.Architecture {
				t.Fatalf("%s: config %+v for manifest %+v", img.ref, cfg, m)
			}
			for _, l := range m.Layers {
				// Each image and platform has layers of its own.
				if other, ok := seen[l.Digest]; ok {
					t.Fatalf("%s %s shares layer %s with %s", img.ref, platformString(*md.Platform), l.Digest, other)
				}
				seen[l.Digest] = img.ref
				get(t, c, base+"/blobs/"+l.Digest.String(), http.StatusOK, l.Digest)
			}
			if img.ref == "ghcr.io/containerd/busybox:1.36" {
				hdrs, data := layerFiles(t, get(t, c, base+"/blobs/"+m.Layers[0].Digest.String(), http.StatusOK, ""))
				for _, user := range []string{"sys:x:3:3:", "www-data:x:33:33:", "nobody:x:65534:65534:"} {
					if !strings.Contains(data["etc/passwd"], "\n"+user) {
						t.Errorf("busybox /etc/passwd lacks %s", user)
					}
				}
				if h := hdrs["bin/sh"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "bin/busybox" {
					t.Errorf("busybox /bin/sh is %+v, want a link to /bin/busybox", h)
				}
			}
		}
	}
	// Unknown things are the distribution API's errors, which containerd's resolver reads as
	// "not found".
	for _, u := range []string{"https://ghcr.io/v2/containerd/busybox/manifests/0.0", "https://ghcr.io/v2/containerd/nothing/manifests/1.36",
		"https://ghcr.io/v2/containerd/busybox/blobs/" + digest.FromString("none").String()} {
		var e struct{ Errors []struct{ Code string } }
		decode(t, get(t, c, u, http.StatusNotFound, ""), &e)
		if len(e.Errors) != 1 || !strings.HasSuffix(e.Errors[0].Code, "_UNKNOWN") {
			t.Errorf("GET %s: errors %+v", u, e.Errors)
		}
	}
}

func TestProxyTunnelsOnlyToStandIns(t *testing.T) {
	s := serveForTest(t)
	// Another host is refused at CONNECT, as an offline machine would fail it.
	if _, err := standInClient(t, s, true).Get("https://example.com/v2/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("CONNECT example.com: %v, want Forbidden", err)
	}
	// Plain HTTP through the proxy is not served.
	resp, err := standInClient(t, s, true).Get("http://ghcr.io/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("plain GET through the proxy: %s", resp.Status)
	}
	// Without the run's CA the certificate is not trusted: only the suite's process trusts it.
	var unknown x509.UnknownAuthorityError
	if _, err := standInClient(t, s, false).Get("https://ghcr.io/v2/"); !errors.As(err, &unknown) {
		t.Errorf("GET without the CA: %v, want an unknown authority", err)
	}
}
