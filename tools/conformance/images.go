// SPDX-License-Identifier: Apache-2.0

// Stand-in images for containerd's integration/client suite: what the suite pulls from ghcr.io
// and registry.k8s.io (its imagelist and a few literal references), rebuilt from the host's static
// busybox, because no registry is reachable where the conformance run happens. Each is a
// multi-platform OCI index, as upstream's are, and every image and platform has layers of its
// own: the suite's garbage-collection and usage tests count and delete content per image, and
// layers shared between images would make them see another image's blobs.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// standInPlatforms are those of each index: three the suite's TestImagePullSomePlatforms asks
// for, and one it must leave alone.
var standInPlatforms = []ocispec.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64", Variant: "v8"},
	{OS: "linux", Architecture: "s390x"},
	{OS: "linux", Architecture: "ppc64le"},
}

// Upstream busybox's accounts: the suite runs as uid 3 ("sys") and by name as "www-data" (33).
const busyboxPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const busyboxGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:daemon
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
`

// volume-ownership is built FROM ubuntu upstream: its test runs as uid 34 ("backup"), calls
// bash, and looks for the setuid bit of /usr/bin/passwd.
const ubuntuExtraPasswd = "backup:x:34:34:backup:/var/backups:/usr/sbin/nologin\n"
const ubuntuExtraGroup = "backup:x:34:\n"

// file is one tar entry of a stand-in layer.
type file struct {
	name     string
	mode     int64
	typ      byte
	data     []byte
	linkname string
	uid, gid int
}

// standIn describes one image: its reference, its layers (each a function of the platform, so
// that every platform gets blobs of its own) and its config.
type standIn struct {
	ref    string
	layers []func(p ocispec.Platform) []file
	config ocispec.ImageConfig
}

// blob is content the registry serves, with the media type it answers with.
type blob struct {
	mediaType string
	data      []byte
}

// repository is what the registry holds for one host/name.
type repository struct {
	tags  map[string]digest.Digest
	blobs map[digest.Digest]blob
}

// epoch dates every entry, so that a stand-in's digests are the same on every machine.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// busyboxRoot is the layer upstream busybox images have: the binary, every applet linked beside
// it in /bin, the usual directories and the accounts.
func busyboxRoot(bin []byte, applets []string, passwd, group string) []file {
	fs := []file{
		{name: "bin/", mode: 0o755, typ: tar.TypeDir},
		{name: "bin/busybox", mode: 0o755, typ: tar.TypeReg, data: bin},
	}
	for _, a := range applets {
		switch a {
		case "busybox":
			continue
		case "nc":
			// Upstream's nc ends on SIGTERM; Debian's installs no handler, and as a
			// container's first process, which the kernel spares every signal it does not
			// handle, it would outlive the suite's TestBindLowPortNonOpt, which waits for
			// it without a deadline. The shell's trap gives it upstream's 143.
			fs = append(fs, file{name: "bin/nc", mode: 0o755, typ: tar.TypeReg,
				data: []byte("#!/bin/sh\ntrap 'exit 143' TERM\n/bin/busybox nc \"$@\" &\nwait $!\n")})
			continue
		}
		fs = append(fs, file{name: "bin/" + a, mode: 0o755, typ: tar.TypeLink, linkname: "bin/busybox"})
	}
	for _, d := range []string{"dev/", "etc/", "home/", "proc/", "root/", "sys/", "usr/", "usr/sbin/", "var/", "var/www/", "var/spool/", "var/spool/mail/"} {
		fs = append(fs, file{name: d, mode: 0o755, typ: tar.TypeDir})
	}
	fs = append(fs,
		file{name: "tmp/", mode: 0o1777, typ: tar.TypeDir},
		file{name: "etc/passwd", mode: 0o644, typ: tar.TypeReg, data: []byte(passwd)},
		file{name: "etc/group", mode: 0o644, typ: tar.TypeReg, data: []byte(group)},
	)
	return fs
}

// marker makes a layer's digest its own: the image and platform it belongs to.
func marker(ref string, p ocispec.Platform, layer int) file {
	return file{name: fmt.Sprintf("etc/stand-in.%d", layer), mode: 0o644, typ: tar.TypeReg,
		data: []byte(fmt.Sprintf("%s %s layer %d\n", ref, platformString(p), layer))}
}

func platformString(p ocispec.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// standIns lists the images the suite pulls on Linux. Images only the Windows suite uses, and
// BusyBoxByDigest (a digest no rebuilt image can have), are left out: pulls of them fail alike
// with both shims.
func standIns(bin []byte, applets []string) []standIn {
	shell := ocispec.ImageConfig{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"sh"}}
	base := func(passwd, group string) func(p ocispec.Platform) []file {
		return func(ocispec.Platform) []file { return busyboxRoot(bin, applets, passwd, group) }
	}
	files := func(fs ...file) func(ocispec.Platform) []file {
		return func(ocispec.Platform) []file { return fs }
	}
	busybox := func(ref string) standIn {
		return standIn{ref: ref, config: shell, layers: []func(ocispec.Platform) []file{base(busyboxPasswd, busyboxGroup)}}
	}
	pause := func(ref string) standIn {
		return standIn{ref: ref,
			config: ocispec.ImageConfig{User: "65535:65535", Entrypoint: []string{"/pause"}},
			layers: []func(ocispec.Platform) []file{base(busyboxPasswd, busyboxGroup),
				files(file{name: "pause", mode: 0o755, typ: tar.TypeReg, data: []byte("#!/bin/sh\nexec sleep inf\n")})}}
	}
	text := []byte("test_content\n")
	copyUp := ocispec.ImageConfig{Env: shell.Env, Cmd: shell.Cmd, Volumes: map[string]struct{}{
		"/test_dir": {}, "C:/weird_test_dir": {}, "/:colon_prefixed": {}}}
	ownership := ocispec.ImageConfig{Env: shell.Env, Cmd: []string{"bash"}, Volumes: map[string]struct{}{"/test_dir": {}}}
	return []standIn{
		busybox("ghcr.io/containerd/busybox:1.36"),
		busybox("registry.k8s.io/e2e-test-images/busybox:1.29-2"),
		pause("registry.k8s.io/pause:3.10.2"),
		pause("registry.k8s.io/pause:3.8"),
		pause("registry.k8s.io/pause:3.6"),
		pause("registry.k8s.io/pause-amd64:3.2"),
		{ref: "ghcr.io/containerd/volume-copy-up:2.2", config: copyUp, layers: []func(ocispec.Platform) []file{
			base(busyboxPasswd, busyboxGroup),
			files(file{name: "test_dir/", mode: 0o755, typ: tar.TypeDir},
				file{name: "test_dir/test_file", mode: 0o644, typ: tar.TypeReg, data: text}),
			files(file{name: "C:/", mode: 0o755, typ: tar.TypeDir},
				file{name: "C:/weird_test_dir/", mode: 0o755, typ: tar.TypeDir},
				file{name: "C:/weird_test_dir/weird_test_file", mode: 0o644, typ: tar.TypeReg, data: text}),
			files(file{name: ":colon_prefixed/", mode: 0o755, typ: tar.TypeDir},
				file{name: ":colon_prefixed/colon_prefixed_file", mode: 0o644, typ: tar.TypeReg, data: text}),
		}},
		{ref: "ghcr.io/containerd/volume-ownership:2.1", config: ownership, layers: []func(ocispec.Platform) []file{
			base(busyboxPasswd+ubuntuExtraPasswd, busyboxGroup+ubuntuExtraGroup),
			// Ubuntu has /run, where the default spec mounts a tmpfs: with a read-only
			// rootfs the mount point must be in the image.
			files(file{name: "run/", mode: 0o755, typ: tar.TypeDir},
				file{name: "usr/bin/", mode: 0o755, typ: tar.TypeDir},
				file{name: "usr/bin/bash", mode: 0o755, typ: tar.TypeReg, data: []byte("#!/bin/sh\nexec sh \"$@\"\n")},
				file{name: "usr/bin/passwd", mode: 0o4755, typ: tar.TypeReg, data: []byte("#!/bin/sh\nexit 1\n")},
				file{name: "test_dir/", mode: 0o755, typ: tar.TypeDir, uid: 65534, gid: 65534}),
		}},
	}
}

// tarLayer writes a layer's files and the marker as a gzipped tar: the blob and its diff ID.
func tarLayer(fs []file) (compressed []byte, diffID digest.Digest, err error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range fs {
		h := &tar.Header{Name: f.name, Mode: f.mode, Typeflag: f.typ, Linkname: f.linkname,
			Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX}
		if f.typ == tar.TypeReg {
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, "", fmt.Errorf("tar header %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, "", fmt.Errorf("tar %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("tar: %w", err)
	}
	diffID = digest.FromBytes(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return nil, "", err
	}
	if _, err := io.Copy(zw, &raw); err != nil {
		return nil, "", fmt.Errorf("gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("gzip: %w", err)
	}
	return gz.Bytes(), diffID, nil
}

// splitRef parses host/name:tag into the registry's repository key and the tag.
func splitRef(ref string) (repo, tag string, err error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") || !strings.Contains(ref[:i], "/") {
		return "", "", fmt.Errorf("reference %q: want host/name:tag", ref)
	}
	return ref[:i], ref[i+1:], nil
}

// put stores v as JSON and returns its descriptor.
func put(r *repository, mediaType string, v any) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("marshal %s: %w", mediaType, err)
	}
	d := digest.FromBytes(data)
	r.blobs[d] = blob{mediaType: mediaType, data: data}
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}, nil
}

// build turns the stand-ins into repositories keyed by host/name.
func build(images []standIn) (map[string]*repository, error) {
	repos := map[string]*repository{}
	for _, img := range images {
		name, tag, err := splitRef(img.ref)
		if err != nil {
			return nil, err
		}
		r := repos[name]
		if r == nil {
			r = &repository{tags: map[string]digest.Digest{}, blobs: map[digest.Digest]blob{}}
			repos[name] = r
		}
		var manifests []ocispec.Descriptor
		for _, p := range standInPlatforms {
			m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
			cfg := ocispec.Image{Platform: p, Config: img.config, Created: &epoch,
				RootFS: ocispec.RootFS{Type: "layers"}}
			for i, layer := range img.layers {
				data, diffID, err := tarLayer(append(layer(p), marker(img.ref, p, i)))
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", img.ref, platformString(p), err)
				}
				d := digest.FromBytes(data)
				r.blobs[d] = blob{mediaType: ocispec.MediaTypeImageLayerGzip, data: data}
				m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: d, Size: int64(len(data))})
				cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diffID)
			}
			if m.Config, err = put(r, ocispec.MediaTypeImageConfig, cfg); err != nil {
				return nil, err
			}
			md, err := put(r, ocispec.MediaTypeImageManifest, m)
			if err != nil {
				return nil, err
			}
			pp := p
			md.Platform = &pp
			manifests = append(manifests, md)
		}
		idx, err := put(r, ocispec.MediaTypeImageIndex, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageIndex, Manifests: manifests})
		if err != nil {
			return nil, err
		}
		r.tags[tag] = idx.Digest
	}
	return repos, nil
}

// busyboxApplets reads the binary and asks it for its applets, as upstream's image build does.
func busyboxApplets(binPath string) ([]byte, []string, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, nil, fmt.Errorf("busybox: %w", err)
	}
	out, err := exec.Command(binPath, "--list").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("%s --list: %w", binPath, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != path.Base(a) || a == "." || a == ".." {
			return nil, nil, fmt.Errorf("%s --list: odd applet %q", binPath, a)
		}
		applets = append(applets, a)
	}
	sort.Strings(applets)
	return bin, applets, nil
}
