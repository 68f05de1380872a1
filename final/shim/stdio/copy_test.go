// SPDX-License-Identifier: Apache-2.0

package stdio

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/fifo"
)

// copyDone runs copyWhenReady in the background and returns what it returns.
func copyDone(dst *bytes.Buffer, src io.Reader) <-chan error {
	done := make(chan error, 1)
	go func() {
		// Owned by the test: it receives from done before it ends.
		done <- copyWhenReady(dst, src)
	}()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the copy did not end")
		return nil
	}
}

func TestCopyWhenReadyPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := make([]byte, 1<<20+123) // more than a pipe and a buffer hold, not a multiple of either
	rand.Read(want)
	var got bytes.Buffer
	done := copyDone(&got, r)
	// Written after the copy is waiting, in pieces with pauses, so that it waits more than once.
	for rest := want; len(rest) > 0; {
		n := min(len(rest), 100_000)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
		time.Sleep(time.Millisecond)
	}
	w.Close()
	if err := wait(t, done); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("copied %d bytes, not the %d written, or not the same", got.Len(), len(want))
	}
}

func TestCopyWhenReadyClosedWhileWaiting(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got bytes.Buffer
	done := copyDone(&got, r)
	time.Sleep(20 * time.Millisecond) // let it wait for data
	r.Close()
	if err := wait(t, done); err == nil {
		t.Error("a copy from a source closed under it ended without an error")
	}
}

func TestCopyWhenReadyFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdin")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// As Create opens stdin: without waiting for a writer.
	in, err := fifo.OpenFifo(context.Background(), path, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var got bytes.Buffer
	done := copyDone(&got, in)
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("typed\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := wait(t, done); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if got.String() != "typed\n" {
		t.Errorf("copied %q", got.String())
	}
}

func TestCopyWhenReadyPlainReader(t *testing.T) {
	var got bytes.Buffer
	if err := copyWhenReady(&got, strings.NewReader("no descriptor")); err != nil || got.String() != "no descriptor" {
		t.Errorf("copy: %v, %q", err, got.String())
	}
}
