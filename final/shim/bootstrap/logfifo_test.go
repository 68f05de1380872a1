// SPDX-License-Identifier: Apache-2.0

// The bundle's log FIFO is opened race-free, as containerd/fifo's OpenFifo opens one.
package bootstrap

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLogFIFOSwappedForSymlink: while the long-lived shim opens the bundle's `log` FIFO, the
// name flips between the FIFO and a symlink to a regular file. Whatever the shim opens must be
// the FIFO: through the symlink, root would append its log to any file. A check of the name
// followed by a second open of it loses this race.
func TestLogFIFOSwappedForSymlink(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader, so that an open of the FIFO for writing succeeds.
	reader, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "log")
	if err := os.Link(fifo, log); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Add(1)
	go func() {
		defer swapper.Done()
		asLink, asFIFO := filepath.Join(dir, "as-link"), filepath.Join(dir, "as-fifo")
		for {
			select {
			case <-stop:
				return
			default:
			}
			// rename replaces log in one step: there is always a log, FIFO or symlink.
			if err := os.Symlink(victim, asLink); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(asLink, log); err != nil {
				t.Error(err)
				return
			}
			if err := os.Link(fifo, asFIFO); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(asFIFO, log); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); swapper.Wait() }()

	var opened int
	for range 20000 {
		f, err := openLogFIFO(log)
		if err != nil {
			continue // the symlink was there: refused, as it must be
		}
		st, err := f.Stat()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Type() != os.ModeNamedPipe {
			t.Fatalf("openLogFIFO opened a %v through the symlink, not the FIFO", st.Mode().Type())
		}
		opened++
	}
	if opened == 0 {
		t.Errorf("the FIFO was never opened: the test raced nothing")
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "victim" {
		t.Errorf("the symlink's target changed: %q, %v", data, err)
	}
}
