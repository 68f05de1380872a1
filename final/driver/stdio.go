// SPDX-License-Identifier: Apache-2.0

// A task's standard streams on the caller's side: named pipes in a directory of their own,
// which the shim opens by path, and the copies between them and the caller's readers and
// writers. Mirrors containerd v2.4 pkg/cio (NewFIFOSetInDir, copyIO in io_unix.go).

package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/containerd/fifo"
)

// FIFOs are a task's standard streams as containerd's cio package makes them: named pipes in a
// directory of their own that the shim opens by path. Empty paths mean "no such stream".
type FIFOs struct {
	Dir                   string
	Stdin, Stdout, Stderr string
}

// NewFIFOs creates stdout and stderr FIFOs for id (and stdin when withStdin) in a fresh
// directory under the driver's state.
func (d *Driver) NewFIFOs(id string, withStdin bool) (*FIFOs, error) {
	base := filepath.Join(d.State, "fifo")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("create fifo directory: %w", err)
	}
	dir, err := os.MkdirTemp(base, id+"-")
	if err != nil {
		return nil, fmt.Errorf("create fifo directory: %w", err)
	}
	f := &FIFOs{Dir: dir, Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr")}
	if withStdin {
		f.Stdin = filepath.Join(dir, "stdin")
	}
	for _, p := range []string{f.Stdin, f.Stdout, f.Stderr} {
		if p == "" {
			continue
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("create fifo: %w", err)
		}
	}
	return f, nil
}

// Remove deletes the FIFOs and their directory.
func (f *FIFOs) Remove() error {
	return os.RemoveAll(f.Dir)
}

// Attached is the driver's end of a task's FIFOs, copying into local writers.
type Attached struct {
	wg      sync.WaitGroup // the copy goroutines
	closers []io.Closer
	stdin   io.WriteCloser
}

// Attach opens the FIFOs and copies stdout and stderr into the given writers, and stdin from
// the given reader when there is one (else stdin is left for OpenStdin), until the shim closes
// its ends. It does not block on a
// shim that has not opened its side yet.
func (f *FIFOs) Attach(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (*Attached, error) {
	a := &Attached{}
	for _, s := range []struct {
		path string
		w    io.Writer
	}{{f.Stdout, stdout}, {f.Stderr, stderr}} {
		if s.path == "" {
			continue
		}
		r, err := fifo.OpenFifo(ctx, s.path, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("open %s: %w", filepath.Base(s.path), err)
		}
		a.closers = append(a.closers, r)
		w := s.w
		if w == nil {
			w = io.Discard
		}
		a.wg.Add(1)
		go func() {
			// Owned by a: ends at EOF, when the shim closes its write end, or when a is closed.
			defer a.wg.Done()
			io.Copy(w, r)
		}()
	}
	if f.Stdin != "" && stdin != nil {
		w, err := f.OpenStdin(ctx)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.stdin = w
		a.closers = append(a.closers, w)
		go func() {
			// Not counted in wg: a terminal's stdin may never end. Closing a ends it.
			io.Copy(w, stdin)
			w.Close()
		}()
	}
	return a, nil
}

// OpenStdin opens the writing end of the stdin FIFO without waiting for the shim to open its
// end; writes wait for it. Closing it is the task's end of input.
func (f *FIFOs) OpenStdin(ctx context.Context) (io.WriteCloser, error) {
	w, err := fifo.OpenFifo(ctx, f.Stdin, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open stdin: %w", err)
	}
	return w, nil
}

// Wait blocks until stdout and stderr reached EOF: everything the task wrote has been copied.
func (a *Attached) Wait() {
	a.wg.Wait()
}

// Close closes every FIFO end the driver holds, which ends the copies.
func (a *Attached) Close() error {
	var errs []error
	for _, c := range a.closers {
		if err := c.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
