// SPDX-License-Identifier: Apache-2.0

// Images without a registry: an OCI image archive, as `ctr images import` reads it (containerd
// v2.4's archive.ImportIndex), holding a sandbox image and a container image that share one
// layer made of Debian's static busybox. No registry is reachable from the lab's machines, and
// CRI is told never to pull.

package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// The two images of the lab. The sandbox image only has to hold the pod's namespaces open, as
// the pause image does; busybox's sleep does that here.
const (
	PauseImage   = "shimwalk.local/pause:lab"
	BusyboxImage = "shimwalk.local/busybox:lab"
)

// image is one image of the archive: its name and what its config runs.
type image struct {
	name       string
	entrypoint []string
	cmd        []string
}

// blob is a content-addressed file of the archive.
type blob struct {
	mediaType string
	data      []byte
}

func (b blob) digest() string {
	sum := sha256.Sum256(b.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b blob) descriptor(annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": b.mediaType, "digest": b.digest(), "size": len(b.data)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}

// WriteImages writes the lab's two images, built around the static busybox at busybox, as an
// OCI image archive at path.
func WriteImages(path, busybox string) error {
	layer, err := busyboxLayer(busybox)
	if err != nil {
		return err
	}
	images := []image{
		{name: PauseImage, entrypoint: []string{"/bin/sleep", "inf"}},
		{name: BusyboxImage, cmd: []string{"sh"}},
	}
	blobs := []blob{layer}
	var manifests []any
	for _, im := range images {
		config, err := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"config": map[string]any{
				"Entrypoint": im.entrypoint,
				"Cmd":        im.cmd,
				"Env":        []string{"PATH=/bin"},
			},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer.digest()}},
		})
		if err != nil {
			return fmt.Errorf("image config of %s: %w", im.name, err)
		}
		cb := blob{"application/vnd.oci.image.config.v1+json", config}
		manifest, err := json.Marshal(map[string]any{
			"schemaVersion": 2,
			"mediaType":     "application/vnd.oci.image.manifest.v1+json",
			"config":        cb.descriptor(nil),
			"layers":        []any{layer.descriptor(nil)},
		})
		if err != nil {
			return fmt.Errorf("manifest of %s: %w", im.name, err)
		}
		mb := blob{"application/vnd.oci.image.manifest.v1+json", manifest}
		blobs = append(blobs, cb, mb)
		// containerd names an imported image after io.containerd.image.name when it is there.
		manifests = append(manifests, mb.descriptor(map[string]string{
			"io.containerd.image.name":          im.name,
			"org.opencontainers.image.ref.name": im.name[strings.LastIndex(im.name, ":")+1:],
		}))
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     manifests,
	})
	if err != nil {
		return fmt.Errorf("image index: %w", err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}
	if err := addDir(tw, "blobs/"); err != nil {
		return err
	}
	if err := addDir(tw, "blobs/sha256/"); err != nil {
		return err
	}
	for _, b := range blobs {
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + strings.TrimPrefix(b.digest(), "sha256:"), b.data})
	}
	for _, f := range files {
		if err := addFile(tw, f.name, 0o644, f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	return nil
}

// busyboxLayer is an uncompressed layer holding /bin/busybox and one symlink to it per applet,
// so that sh, sleep and the rest are on PATH, as in the rootfs the tests build.
func busyboxLayer(busybox string) (blob, error) {
	data, err := os.ReadFile(busybox)
	if err != nil {
		return blob{}, fmt.Errorf("busybox for the images: %w", err)
	}
	// A dynamically linked busybox would find no libc in the image.
	if exec.Command("ldd", busybox).Run() == nil {
		return blob{}, fmt.Errorf("%s is not static: install busybox-static", busybox)
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return blob{}, fmt.Errorf("busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "sys/", "tmp/"} {
		if err := addDir(tw, d); err != nil {
			return blob{}, err
		}
	}
	if err := addFile(tw, "bin/busybox", 0o755, data); err != nil {
		return blob{}, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		hdr := &tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return blob{}, fmt.Errorf("layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return blob{}, fmt.Errorf("layer: %w", err)
	}
	return blob{"application/vnd.oci.image.layer.v1.tar", buf.Bytes()}, nil
}

// epoch dates every entry, so that the same busybox always gives the same digests.
var epoch = time.Unix(0, 0)

func addDir(tw *tar.Writer, name string) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: epoch}); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	return nil
}

func addFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	return nil
}
