// SPDX-License-Identifier: Apache-2.0

// The bundle's config.json as the shim reads it: bounded, never through a symlink, refused with
// InvalidArgument when the request got it wrong. containerd v2.4's runc shim reads it unchecked
// (runc.readSpec in cmd/containerd-shim-runc-v2/runc/util.go, and its manager for the group
// annotation); runc's log file, which NewRunc in cmd/containerd-shim-runc-v2/process/init.go
// names, is set up here too.

package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// MaxSpecSize bounds config.json. Real specs are a few KiB; a bigger one is a mistake or an
// attack, and the start action and runc would each read all of it into memory.
const MaxSpecSize = 4 << 20

// Check refuses, with InvalidArgument, a bundle the shim must not write into or hand to runc: a
// relative path, anything but a directory (a symlink would send the shim's files elsewhere),
// or one whose config.json is missing, not a regular file, larger than MaxSpecSize or not a
// JSON runtime spec.
func Check(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("bundle %q is not an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	st, err := os.Lstat(dir)
	switch {
	case err != nil && requestError(err):
		return fmt.Errorf("bundle %s: %v: %w", dir, err, errdefs.ErrInvalidArgument)
	case err != nil:
		return fmt.Errorf("bundle %s: %w", dir, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("bundle %s is a symlink, not a directory: %w", dir, errdefs.ErrInvalidArgument)
	case !st.IsDir():
		return fmt.Errorf("bundle %s is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	var spec struct {
		OCIVersion string `json:"ociVersion"`
	}
	return ReadSpec(dir, &spec)
}

// requestError tells a path the request got wrong (missing, not a directory, a symlink where
// none may be) from a failure of the host's (EACCES, EMFILE, EIO), which is not InvalidArgument.
func requestError(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// ReadAnnotations reads the annotations of dir's runtime spec, refusing with InvalidArgument
// what Check refuses; a bundle with no config.json yet has none. Only the one field is
// decoded: the start action, which needs it to find a container's group, runs on the path of
// every container start, and decoding a whole specs.Spec costs a fresh process encoding/json's
// field tables for every type in it (0.3 ms of a 4.5 ms start action, with a small spec).
func ReadAnnotations(dir string) (map[string]string, error) {
	if _, err := os.Lstat(filepath.Join(dir, ConfigFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := ReadSpec(dir, &spec); err != nil {
		return nil, err
	}
	return spec.Annotations, nil
}

// ReadSpec decodes dir's runtime spec into spec, bounded and never through a symlink. Its
// callers decode only the fields they need: Check decodes one, since the daemon only validates
// config.json, and decoding a whole specs.Spec builds encoding/json's field tables for every
// type in it, which stay in the shim's heap for good.
func ReadSpec(dir string, spec any) error {
	path := filepath.Join(dir, ConfigFile)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil && requestError(err) {
		return fmt.Errorf("bundle %s has no config.json: %v: %w", filepath.Dir(path), err, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return fmt.Errorf("open config.json: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: %w", path, errdefs.ErrInvalidArgument)
	}
	if st.Size() > MaxSpecSize {
		return fmt.Errorf("%s is %d bytes, more than %d: %w", path, st.Size(), MaxSpecSize, errdefs.ErrInvalidArgument)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecSize+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxSpecSize {
		return fmt.Errorf("%s is more than %d bytes: %w", path, MaxSpecSize, errdefs.ErrInvalidArgument)
	}
	if err := json.Unmarshal(data, spec); err != nil {
		return fmt.Errorf("%s is not a runtime spec: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// PrepareRuncLog makes runc's log in dir a regular file of the bundle's own before runc first
// runs: runc opens it to append and follows a symlink, which would have it write elsewhere.
func PrepareRuncLog(dir string) error {
	path := filepath.Join(dir, RuncLogFile)
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("replace %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return f.Close()
}
