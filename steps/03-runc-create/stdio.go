// SPDX-License-Identifier: Apache-2.0

// Container stdio over FIFOs (since step 03): runc gets pipes, and the shim copies between the
// pipes and the FIFOs containerd named in the request. Mirrors containerd v2.4
// cmd/containerd-shim-runc-v2/process/io.go createIO and copyPipes; FIFOs only, binary:// and file:// come in final.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/fifo"
	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// stdio is the shim's side of a process's standard streams.
type stdio struct {
	runc.IO                // the pipes runc hands the container
	wg      sync.WaitGroup // output copies; done when the container side of each pipe closed
	fifos   []io.Closer
	stdin   string   // path, to release an open that waits for a writer
	devNull *os.File // stdout and stderr of a process that has only stdin
}

// newStdio creates the pipes for a process and starts copying between them and the FIFOs at
// the given paths. An empty path means /dev/null. Copies of output end when every process
// holding the pipe's write end has exited; stdin's ends when the writer closes or on close.
func newStdio(stdinPath, stdoutPath, stderrPath string) (*stdio, error) {
	for _, p := range []string{stdinPath, stdoutPath, stderrPath} {
		if strings.Contains(p, "://") {
			return nil, fmt.Errorf("stdio %q: only FIFO paths are supported in this step (binary:// and file:// come in final)", p)
		}
	}
	s := &stdio{stdin: stdinPath}
	if stdinPath == "" && stdoutPath == "" && stderrPath == "" {
		nio, err := runc.NewNullIO()
		if err != nil {
			return nil, fmt.Errorf("null io: %w", err)
		}
		s.IO = nio
		return s, nil
	}
	pio, err := runc.NewPipeIO(0, 0, func(o *runc.IOOption) {
		o.OpenStdin, o.OpenStdout, o.OpenStderr = stdinPath != "", stdoutPath != "", stderrPath != ""
	})
	if err != nil {
		return nil, fmt.Errorf("create pipes: %w", err)
	}
	s.IO = pio
	if stdoutPath == "" && stderrPath == "" {
		if s.devNull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
			s.Close()
			return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
	}
	for _, out := range []struct {
		path string
		r    io.Reader
	}{{stdoutPath, pio.Stdout()}, {stderrPath, pio.Stderr()}} {
		if out.path == "" {
			continue
		}
		// Read-write never blocks, whether or not the reader has opened its end yet, and keeps
		// the FIFO from breaking if the reader goes away: output waits in the pipe instead.
		f, err := os.OpenFile(out.path, os.O_RDWR, 0)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open %s: %w", out.path, err)
		}
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			f.Close()
			s.Close()
			return nil, fmt.Errorf("stdio %s is not a FIFO", out.path)
		}
		s.fifos = append(s.fifos, f)
		s.wg.Add(1)
		go func(r io.Reader) {
			// Owned by s: ends at EOF on the pipe, once the container's processes have exited.
			defer s.wg.Done()
			io.Copy(f, r)
			// Closing our only handle lets the reader see EOF.
			f.Close()
		}(out.r)
	}
	if stdinPath != "" {
		// Not the request's context: the writer may open its end after Create has returned, and
		// the fifo package gives up on an open whose context has ended.
		in, err := fifo.OpenFifo(context.Background(), stdinPath, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open %s: %w", stdinPath, err)
		}
		s.fifos = append(s.fifos, in)
		w := pio.Stdin()
		go func() {
			// Owned by s: ends when the writer closes stdin, or when Close closes the FIFO.
			io.Copy(w, in)
			w.Close()
		}()
	}
	return s, nil
}

// Set hands runc the container's ends of the pipes. With stdin alone, go-runc would read runc's
// own output through a pipe the container inherits, and runc create would return only when the
// container is gone: /dev/null stands in for the outputs.
func (s *stdio) Set(cmd *exec.Cmd) {
	s.IO.Set(cmd)
	if s.devNull != nil {
		cmd.Stdout, cmd.Stderr = s.devNull, s.devNull
	}
}

// CloseAfterStart closes the shim's copies of the pipe ends runc handed to the container. go-runc
// calls it once runc has started; without it the shim itself would keep every output pipe open
// and the FIFO readers would never see EOF.
func (s *stdio) CloseAfterStart() error {
	if c, ok := s.IO.(runc.StartCloser); ok {
		return c.CloseAfterStart()
	}
	return nil
}

// wait blocks until the output copies are done: everything the container wrote was delivered.
func (s *stdio) wait() {
	s.wg.Wait()
}

// Close closes the pipes and the FIFOs, which ends every copy.
func (s *stdio) Close() error {
	for _, c := range s.fifos {
		c.Close()
	}
	if s.stdin != "" {
		// The stdin FIFO is opened in the background and that open waits for a writer. If none
		// ever came, a writer that comes and goes releases it.
		if fd, err := unix.Open(s.stdin, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}
	if s.devNull != nil {
		s.devNull.Close()
	}
	if s.IO != nil {
		return s.IO.Close()
	}
	return nil
}
