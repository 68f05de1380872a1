// SPDX-License-Identifier: Apache-2.0

package bundle

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// write puts data at dir/name, for a test's bundle.
func write(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// specBundle is a bundle directory whose config.json is spec.
func specBundle(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, ConfigFile, spec)
	return dir
}

func TestCheckRefusesWhatTheRequestGotWrong(t *testing.T) {
	outside := specBundle(t, `{"ociVersion": "1.0.2"}`)
	for _, tc := range []struct {
		name   string
		bundle func(t *testing.T) string
	}{
		{"relative path", func(t *testing.T) string { return "bundle" }},
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }},
		{"a file", func(t *testing.T) string { return write(t, t.TempDir(), "file", "") }},
		{"a symlink to a bundle", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{"no config.json", func(t *testing.T) string { return t.TempDir() }},
		{"config.json a symlink", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Symlink(filepath.Join(outside, ConfigFile), filepath.Join(dir, ConfigFile)); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"config.json a directory", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, ConfigFile), 0o700); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		// A FIFO nobody writes to: a blocking open would hang the shim.
		{"config.json a FIFO", func(t *testing.T) string {
			dir := t.TempDir()
			if err := unix.Mkfifo(filepath.Join(dir, ConfigFile), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		// Valid JSON but for its size: only the bound refuses it.
		{"config.json too big", func(t *testing.T) string {
			return specBundle(t, "{}"+strings.Repeat(" ", MaxSpecSize-1))
		}},
		{"config.json not JSON", func(t *testing.T) string { return specBundle(t, `{"ociVersion": `) }},
		{"config.json not an object", func(t *testing.T) string { return specBundle(t, `["a", "list"]`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.bundle(t))
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("Check = %v, want InvalidArgument", err)
			}
		})
	}
}

func TestCheckAcceptsABundle(t *testing.T) {
	if err := Check(specBundle(t, `{"ociVersion": "1.0.2", "process": {"args": ["sh"]}}`)); err != nil {
		t.Fatal(err)
	}
	// The bound is on the size, not on what fills it.
	dir := specBundle(t, `{"ociVersion": "1.0.2"}`+strings.Repeat(" ", MaxSpecSize-len(`{"ociVersion": "1.0.2"}`)))
	if err := Check(dir); err != nil {
		t.Errorf("a spec of exactly MaxSpecSize bytes: %v", err)
	}
}

func TestReadAnnotations(t *testing.T) {
	got, err := ReadAnnotations(specBundle(t, `{"annotations": {"io.kubernetes.cri.sandbox-id": "pod"}}`))
	if err != nil || got["io.kubernetes.cri.sandbox-id"] != "pod" {
		t.Errorf("ReadAnnotations = %v, %v", got, err)
	}
	// The start action may run before the spec is written: no spec, no annotations.
	if got, err := ReadAnnotations(t.TempDir()); got != nil || err != nil {
		t.Errorf("without config.json: %v, %v; want none and no error", got, err)
	}
	if _, err := ReadAnnotations(specBundle(t, `{"annotations": ["a"]}`)); !errdefs.IsInvalidArgument(err) {
		t.Errorf("annotations of the wrong type: %v, want InvalidArgument", err)
	}
}

func TestReadSpecDecodesWhatItIsGiven(t *testing.T) {
	dir := specBundle(t, `{"ociVersion": "1.0.2", "linux": {"namespaces": [{"type": "pid"}]}}`)
	var spec struct {
		Linux struct {
			Namespaces []struct{ Type string } `json:"namespaces"`
		} `json:"linux"`
	}
	if err := ReadSpec(dir, &spec); err != nil || len(spec.Linux.Namespaces) != 1 || spec.Linux.Namespaces[0].Type != "pid" {
		t.Errorf("ReadSpec = %+v, %v", spec, err)
	}
}

func TestPrepareRuncLogReplacesASymlink(t *testing.T) {
	dir := t.TempDir()
	victim := write(t, t.TempDir(), "victim", "untouched")
	if err := os.Symlink(victim, filepath.Join(dir, RuncLogFile)); err != nil {
		t.Fatal(err)
	}
	if err := PrepareRuncLog(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(dir, RuncLogFile))
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf("log.json is %v (%v), want a regular file 0600", st.Mode(), err)
	}
	if data, _ := os.ReadFile(victim); string(data) != "untouched" {
		t.Errorf("the symlink's target now holds %q", data)
	}
	// A log that is there already keeps what runc wrote.
	write(t, dir, RuncLogFile, "line\n")
	if err := PrepareRuncLog(dir); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, RuncLogFile)); string(data) != "line\n" {
		t.Errorf("log.json now holds %q", data)
	}
}

func TestOptionsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if o, err := LoadOptions(dir); err != nil || o != (Options{}) {
		t.Errorf("none recorded: %+v, %v; want the defaults", o, err)
	}
	want := Options{BinaryName: "crun", Root: "/run/r", SystemdCgroup: true, IoUID: 1000, IoGID: 1001, CriuWorkPath: "/w"}
	if err := SaveOptions(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadOptions(dir); err != nil || got != want {
		t.Errorf("LoadOptions = %+v, %v; want %+v", got, err, want)
	}
	mode(t, filepath.Join(dir, OptionsFile), 0o600)
	// The field names are the format: a delete action must read what an older shim wrote.
	write(t, dir, OptionsFile, `{"BinaryName": "runc", "Root": "/old"}`)
	if got, err := LoadOptions(dir); err != nil || got.BinaryName != "runc" || got.Root != "/old" {
		t.Errorf("LoadOptions = %+v, %v", got, err)
	}
	write(t, dir, OptionsFile, `{"BinaryName": `)
	if _, err := LoadOptions(dir); err == nil {
		t.Error("options.json that is not JSON: no error")
	}
}

func TestExitRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadExit(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no exit.json: %v, want not found", err)
	}
	want := ExitRecord{Pid: 42, ExitStatus: 137, ExitedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	if err := WriteExit(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExit(dir)
	if err != nil || got.Pid != want.Pid || got.ExitStatus != want.ExitStatus || !got.ExitedAt.Equal(want.ExitedAt) {
		t.Errorf("ReadExit = %+v, %v; want %+v", got, err, want)
	}
	mode(t, filepath.Join(dir, ExitFile), 0o600)
	// The names the step 06 shim writes too, and the tests read.
	var fields map[string]json.RawMessage
	data, _ := os.ReadFile(filepath.Join(dir, ExitFile))
	if err := json.Unmarshal(data, &fields); err != nil || len(fields) != 3 || fields["pid"] == nil || fields["exit_status"] == nil || fields["exited_at"] == nil {
		t.Errorf("exit.json is %s", data)
	}
	for _, bad := range []string{`{"pid": 0, "exit_status": 1}`, `{"exit_status": 1}`, `{"pid": `} {
		write(t, dir, ExitFile, bad)
		if r, err := ReadExit(dir); err == nil {
			t.Errorf("exit.json %s: read as %+v", bad, r)
		}
	}
	if err := RemoveExit(dir); err != nil {
		t.Fatal(err)
	}
	if err := RemoveExit(dir); err != nil {
		t.Errorf("removing what is gone: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ExitFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("exit.json is still there: %v", err)
	}
}

func TestWritesReplaceASymlink(t *testing.T) {
	dir := t.TempDir()
	victim := write(t, t.TempDir(), "victim", "untouched")
	for _, name := range []string{ExitFile, OptionsFile, AddressFile, ShimPidFile, BootstrapFile} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		WriteExit(dir, ExitRecord{Pid: 1}),
		SaveOptions(dir, Options{}),
		WriteAddress(dir, "unix:///s"),
		WritePidFile(filepath.Join(dir, ShimPidFile), 1),
		WriteBootstrap(dir, Bootstrap{Address: "unix:///s"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if data, _ := os.ReadFile(victim); string(data) != "untouched" {
		t.Errorf("a symlink's target now holds %q", data)
	}
}

func TestPidFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ShimPidFile)
	if _, err := ReadPidFile(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no pid file: %v, want not found", err)
	}
	if err := WritePidFile(path, 4242); err != nil {
		t.Fatal(err)
	}
	mode(t, path, 0o600)
	if pid, err := ReadPidFile(path); err != nil || pid != 4242 {
		t.Errorf("ReadPidFile = %d, %v", pid, err)
	}
	// runc ends its pid files without a newline; others may add one.
	write(t, dir, InitPidFile, "17\n")
	if pid, err := ReadPidFile(filepath.Join(dir, InitPidFile)); err != nil || pid != 17 {
		t.Errorf("ReadPidFile = %d, %v", pid, err)
	}
	for _, bad := range []string{"", "0", "-3", "pid", "12 13"} {
		write(t, dir, InitPidFile, bad)
		if pid, err := ReadPidFile(filepath.Join(dir, InitPidFile)); err == nil {
			t.Errorf("pid file %q read as %d", bad, pid)
		}
	}
	if got := ExecPidFile("probe"); got != "exec-probe.pid" {
		t.Errorf("ExecPidFile = %q", got)
	}
}

func TestAddressAndBootstrap(t *testing.T) {
	dir := t.TempDir()
	if err := WriteAddress(dir, "unix:///run/s/1"); err != nil {
		t.Fatal(err)
	}
	mode(t, filepath.Join(dir, AddressFile), 0o600)
	if data, _ := os.ReadFile(filepath.Join(dir, AddressFile)); string(data) != "unix:///run/s/1" {
		t.Errorf("address holds %q, want the bare address as containerd 1.6 reads it", data)
	}
	write(t, dir, AddressFile, "unix:///run/s/2\n")
	if a, err := ReadAddress(dir); err != nil || a != "unix:///run/s/2" {
		t.Errorf("ReadAddress = %q, %v", a, err)
	}
	b := Bootstrap{Version: 3, Address: "unix:///run/s/1", Protocol: "ttrpc"}
	if err := WriteBootstrap(dir, b); err != nil {
		t.Fatal(err)
	}
	mode(t, filepath.Join(dir, BootstrapFile), 0o600)
	// containerd reads this file after a restart: its keys are containerd's.
	if data, _ := os.ReadFile(filepath.Join(dir, BootstrapFile)); string(data) != `{"version":3,"address":"unix:///run/s/1","protocol":"ttrpc"}` {
		t.Errorf("bootstrap.json is %s", data)
	}
	if got := b.SocketPath(); got != "/run/s/1" {
		t.Errorf("SocketPath = %q", got)
	}
}

// mode fails the test unless path is a regular file with permissions perm.
func mode(t *testing.T, path string, perm os.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != perm {
		t.Errorf("%s: %v (%v), want a regular file %v", filepath.Base(path), st.Mode(), err, perm)
	}
}
