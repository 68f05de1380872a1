// SPDX-License-Identifier: Apache-2.0

package stdio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/console"
	"github.com/containerd/fifo"
	runc "github.com/containerd/go-runc"
)

// Console is a process's terminal. runc creates the pty and sends its master end over a unix
// socket; the shim copies between the master and the FIFOs containerd named.
type Console struct {
	cfg    Config
	socket *runc.Socket

	mu     sync.Mutex
	master console.Console // guarded by mu; nil until Attach
	stdin  io.Closer       // guarded by mu
	wg     sync.WaitGroup  // the output copy
}

// NewConsole makes the socket runc sends the master to (runc --console-socket).
func NewConsole(cfg Config) (*Console, error) {
	if !cfg.Terminal {
		return nil, errors.New("not a terminal")
	}
	// Checked now, before runc makes a container whose terminal could not be attached.
	for _, path := range []string{cfg.Stdin, cfg.Stdout} {
		if path != "" {
			if err := CheckFIFO(path); err != nil {
				return nil, err
			}
		}
	}
	s, err := runc.NewTempConsoleSocket()
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	return &Console{cfg: cfg, socket: s}, nil
}

// Socket is what runc create or runc exec gets as --console-socket.
func (c *Console) Socket() runc.ConsoleSocket {
	return c.socket
}

// Attach receives the master from runc (call it after runc create or exec returned) and starts
// the copies: stdin FIFO to the terminal, the terminal to the stdout FIFO.
func (c *Console) Attach() error {
	master, err := c.socket.ReceiveMaster()
	c.socket.Close()
	if err != nil {
		return fmt.Errorf("receive the pty master: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.master = master
	if c.cfg.Stdout != "" {
		out, err := outputFIFO(c.cfg.Stdout)
		if err != nil {
			return fmt.Errorf("open %s: %w", c.cfg.Stdout, err)
		}
		c.wg.Add(1)
		go func() {
			// Owned by c: ends when the last process holding the terminal exits (reads fail
			// with EIO then), or when Close closes the master.
			defer c.wg.Done()
			io.Copy(out, master)
			out.Close()
		}()
	}
	if c.cfg.Stdin != "" {
		in, err := fifo.OpenFifo(context.Background(), c.cfg.Stdin, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", c.cfg.Stdin, err)
		}
		c.stdin = in
		go func() {
			// Owned by c: ends when the writer closes stdin, or when CloseStdin or Close
			// closes the FIFO.
			io.Copy(master, in)
		}()
	}
	return nil
}

// Resize sets the terminal's size (the ResizePty RPC).
func (c *Console) Resize(width, height uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.master == nil {
		return errors.New("the terminal is not attached yet")
	}
	return c.master.Resize(console.WinSize{Width: uint16(width), Height: uint16(height)})
}

// CloseStdin stops copying input (the CloseIO RPC). The terminal stays: on a terminal, end
// of input is a character (^D), not a closed descriptor.
func (c *Console) CloseStdin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stdin == nil {
		return nil
	}
	err := c.stdin.Close()
	c.stdin = nil
	return err
}

// Wait blocks until the output copy is done, at most timeout.
func (c *Console) Wait(timeout time.Duration) {
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// Close closes the terminal and the FIFOs.
func (c *Console) Close() error {
	c.socket.Close()
	c.CloseStdin()
	if c.cfg.Stdin != "" {
		releaseOpen(c.cfg.Stdin)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.master != nil {
		return c.master.Close()
	}
	return nil
}

// releaseOpen lets a background open of a FIFO for reading return, by being a writer that
// comes and goes: the open waits for a writer, and none may ever come.
func releaseOpen(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}
