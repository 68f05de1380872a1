// SPDX-License-Identifier: Apache-2.0

// The bundle's log FIFO is opened race-free, as containerd/fifo's OpenFifo opens one.
package bootstrap

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLogFIFOSwappedForSymlink: the bundle's `log` is swapped for a symlink to a regular file
// right after the shim checked that it is a FIFO (a hook makes that moment certain). What the
// shim opens must still be the FIFO: through the symlink, root would append its log to any
// file. A check of the name followed by a second open of it loses this race.
func TestLogFIFOSwappedForSymlink(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	if err := unix.Mkfifo(log, 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader, so that an open of the FIFO for writing succeeds.
	reader, err := os.OpenFile(log, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	testLogFIFOChecked = func() {
		// rename replaces log in one step, as an attacker's swap would.
		if err := os.Symlink(victim, log+".new"); err != nil {
			t.Error(err)
		}
		if err := os.Rename(log+".new", log); err != nil {
			t.Error(err)
		}
	}
	defer func() { testLogFIFOChecked = nil }()

	f, err := openLogFIFO(log)
	if err != nil {
		t.Fatalf("the FIFO was there when checked, yet: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeNamedPipe {
		t.Errorf("openLogFIFO opened a %v through the symlink, not the FIFO", st.Mode().Type())
	}
	if data, _ := os.ReadFile(victim); string(data) != "victim" {
		t.Errorf("the symlink's target was written: %q", data)
	}
}
