// SPDX-License-Identifier: Apache-2.0

// A process's stdio without a terminal: runc's pipes wired to containerd's FIFOs, a file:// file,
// a binary:// logger or nothing, as containerd v2.4's runc shim does in createIO and
// NewBinaryIO (cmd/containerd-shim-runc-v2/process/io.go).

package stdio

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// Config is a process's stdio as containerd names it in Create and Exec: FIFO paths, a
// binary:// or file:// URI for stdout (and stderr), empty for /dev/null.
type Config struct {
	Stdin, Stdout, Stderr string
	Terminal              bool
}

// isNull reports whether the process has no stdio at all.
func (c Config) isNull() bool {
	return c.Stdin == "" && c.Stdout == "" && c.Stderr == ""
}

// Pipes is the shim's side of a process's stdio when it has no terminal: pipes handed to runc,
// and the copies between them and wherever containerd asked the output to go.
type Pipes struct {
	runc.IO
	wg      sync.WaitGroup // output copies; done when the process side of each pipe closed
	closers []io.Closer
	stdinW  io.WriteCloser // the process's stdin
	// keeper is the shim's own writer of the stdin FIFO (openStdin); CloseIO closes it.
	keeper io.Closer
	logger *logger // the logging binary, for binary://
	// devNull is the process's stdout and stderr when only stdin was asked for. Left unset,
	// go-runc would capture runc's output through a pipe the container inherits, and wait for
	// the container's exit before runc create or exec returned.
	devNull *os.File
}

// Set hands runc the process's ends of the pipes.
func (p *Pipes) Set(cmd *exec.Cmd) {
	p.IO.Set(cmd)
	if p.devNull != nil {
		cmd.Stdout, cmd.Stderr = p.devNull, p.devNull
	}
}

// Open creates the stdio of process id in namespace. uid and gid own the pipes (the process
// may run as another user). monitor starts the logging binary of a binary:// URI, so that its
// exit is not taken for a container's.
func Open(cfg Config, id, namespace string, uid, gid int, monitor runc.ProcessMonitor) (*Pipes, error) {
	if cfg.Terminal {
		return nil, errors.New("a terminal's stdio goes through a console, not pipes")
	}
	if cfg.isNull() {
		nio, err := runc.NewNullIO()
		if err != nil {
			return nil, fmt.Errorf("null io: %w", err)
		}
		return &Pipes{IO: nio}, nil
	}
	u, err := url.Parse(cfg.Stdout)
	if err != nil {
		return nil, fmt.Errorf("stdout %q: %v: %w", cfg.Stdout, err, errdefs.ErrInvalidArgument)
	}
	switch u.Scheme {
	case "", "fifo":
		return openCopied(cfg, uid, gid, outputFIFO)
	case "file":
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("stdout %q: a file:// URI needs an absolute path: %w", cfg.Stdout, errdefs.ErrInvalidArgument)
		}
		cfg.Stdout, cfg.Stderr = u.Path, u.Path
		return openCopied(cfg, uid, gid, outputFile)
	case "binary", "binary-v2":
		return openBinary(cfg, u, id, namespace, monitor)
	}
	return nil, fmt.Errorf("stdout %q: unknown scheme %q (want fifo, file, binary or binary-v2): %w", cfg.Stdout, u.Scheme, errdefs.ErrInvalidArgument)
}

// checkFIFO refuses a stdio path that is not a FIFO itself: a regular file, a directory, a
// symlink (whose target the caller did not name) or nothing. containerd creates the FIFOs
// before it asks; anything else is a request to refuse, not to follow.
func checkFIFO(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("stdio %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	kind := "not a FIFO"
	switch m := st.Mode(); {
	case m&os.ModeNamedPipe != 0:
		return nil
	case m.IsRegular():
		kind = "a regular file"
	case m.IsDir():
		kind = "a directory"
	case m&os.ModeSymlink != 0:
		kind = "a symlink"
	}
	return fmt.Errorf("stdio %s is %s, not a FIFO: %w", path, kind, errdefs.ErrInvalidArgument)
}

// openStdin opens a stdin FIFO as containerd's shim does (cmd/containerd-shim-runc-v2/process
// init.go, openStdin): a read end for the copy into the process, and a write end the shim keeps.
// The shim's writer holds the input open between clients: one that closes its end (a detached
// ctr, a CRI attach that ends) does not end the process's input. CloseIO closes the shim's
// writer, and the copy sees EOF once no client holds one either. Neither open blocks, so no
// thread waits for a client that may never come.
func openStdin(path string) (r, keeper *os.File, err error) {
	if err := checkFIFO(path); err != nil {
		return nil, nil, err
	}
	// The read end first: a non-blocking open for writing fails (ENXIO) while no reader exists.
	r, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	// What was checked may have been replaced since; a FIFO is what was opened.
	if st, err := r.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		r.Close()
		return nil, nil, fmt.Errorf("stdio %s is no longer a FIFO: %w", path, errdefs.ErrInvalidArgument)
	}
	keeper, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	return r, keeper, nil
}

// outputFIFO opens a FIFO for output. Read-write never blocks, whether or not the reader has
// opened its end yet, and keeps the FIFO from breaking if the reader goes away: output waits
// in the pipe instead of being lost.
func outputFIFO(path string) (io.WriteCloser, error) {
	if err := checkFIFO(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		f.Close()
		return nil, fmt.Errorf("%s is not a FIFO", path)
	}
	return f, nil
}

// outputFile opens a log file for appending; stdout and stderr of a file:// URI share it.
func outputFile(path string) (io.WriteCloser, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o640)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EISDIR) {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return f, err
}

func openCopied(cfg Config, uid, gid int, openOut func(string) (io.WriteCloser, error)) (*Pipes, error) {
	pio, err := runc.NewPipeIO(uid, gid, func(o *runc.IOOption) {
		o.OpenStdin, o.OpenStdout, o.OpenStderr = cfg.Stdin != "", cfg.Stdout != "", cfg.Stderr != ""
	})
	if err != nil {
		return nil, fmt.Errorf("create pipes: %w", err)
	}
	p := &Pipes{IO: pio}
	if cfg.Stdout == "" && cfg.Stderr == "" {
		if p.devNull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
			pio.Close()
			return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		p.closers = append(p.closers, p.devNull)
	}
	outs := map[string]*sharedWriter{}
	for _, out := range []struct {
		path string
		r    io.Reader
	}{{cfg.Stdout, pio.Stdout()}, {cfg.Stderr, pio.Stderr()}} {
		if out.path == "" {
			continue
		}
		w, ok := outs[out.path]
		if !ok {
			f, err := openOut(out.path)
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("open %s: %w", out.path, err)
			}
			w = &sharedWriter{w: f}
			outs[out.path] = w
			p.closers = append(p.closers, f)
		}
		w.users++
		p.wg.Add(1)
		go func(r io.Reader, w *sharedWriter) {
			// Owned by p: ends at EOF, once every process holding the pipe has exited.
			defer p.wg.Done()
			_ = copyWhenReady(w, r)
			// The last copy into a file closes it, so that a FIFO's reader sees EOF.
			w.done()
		}(out.r, w)
	}
	if cfg.Stdin != "" {
		in, keeper, err := openStdin(cfg.Stdin)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.closers = append(p.closers, in, keeper)
		p.stdinW, p.keeper = pio.Stdin(), keeper
		go func() {
			// Owned by p: ends at EOF, once CloseIO closed the shim's writer and no client
			// holds one, or when Close closes the FIFO.
			_ = copyWhenReady(p.stdinW, in)
			p.stdinW.Close()
		}()
	}
	return p, nil
}

// sharedWriter closes its file once every copy into it is done. Writes from two copies may
// interleave, as they would on a terminal.
type sharedWriter struct {
	mu    sync.Mutex
	w     io.WriteCloser
	users int // guarded by mu
}

func (s *sharedWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *sharedWriter) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users--
	if s.users == 0 {
		s.w.Close()
	}
}

// openBinary hands the process the pipes of a logging binary (startLogger).
func openBinary(cfg Config, u *url.URL, id, namespace string, monitor runc.ProcessMonitor) (*Pipes, error) {
	outW, errW, lg, err := startLogger(u, id, namespace, monitor)
	if err != nil {
		return nil, err
	}
	return &Pipes{IO: &binaryIO{out: outW, err: errW}, logger: lg}, nil
}

// startLogger starts the logging binary of a binary:// URI the way containerd does
// (cmd/containerd-shim-runc-v2/process/io.go NewBinaryIO, NewBinaryCmd): stdout's read end as
// fd 3, stderr's as fd 4, and fd 5, which it closes once it is ready; the URI's query as its
// arguments. Under binary:// it is ready when it closes fd 5; under binary-v2:// (containerd
// 2.2 and later) it must write a byte to it first, so that a logger that crashed at start is
// not taken for a ready one. Its environment is CONTAINER_ID and CONTAINER_NAMESPACE and
// nothing else: the shim's own holds containerd's (proxy credentials, secrets a service unit
// sets) and the addresses of containerd's APIs, none of which a logger of one container's
// output needs. It returns the write ends of the logger's stdout and stderr.
func startLogger(u *url.URL, id, namespace string, monitor runc.ProcessMonitor) (outW, errW *os.File, _ *logger, err error) {
	if monitor == nil {
		return nil, nil, nil, errors.New("binary:// needs a process monitor")
	}
	var closers []io.Closer
	defer func() {
		if err != nil {
			for _, c := range closers {
				c.Close()
			}
		}
	}()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("logging binary %s: stdout pipe: %w", u.Path, err)
	}
	closers = append(closers, outR, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("logging binary %s: stderr pipe: %w", u.Path, err)
	}
	closers = append(closers, errR, errW)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("logging binary %s: readiness pipe: %w", u.Path, err)
	}
	closers = append(closers, readyR, readyW)
	var args []string
	for k, vs := range u.Query() {
		args = append(args, k)
		// A key without a value still gives an argument after it, empty, as containerd's
		// shim passes it.
		if len(vs) > 0 {
			args = append(args, vs[0])
		}
	}
	cmd := exec.Command(u.Path, args...)
	cmd.Env = []string{"CONTAINER_ID=" + id, "CONTAINER_NAMESPACE=" + namespace}
	cmd.ExtraFiles = []*os.File{outR, errR, readyW}
	ec, err := monitor.Start(cmd)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start logging binary %s: %w", u.Path, err)
	}
	lg := &logger{cmd: cmd, exited: make(chan struct{})}
	go func() {
		// Owned by the logging binary: ends when it exits, which Close brings about.
		defer close(lg.exited)
		monitor.Wait(cmd, ec)
	}()
	// Our copies of its ends go, so that its exit (or its close of fd 5) is seen.
	outR.Close()
	errR.Close()
	readyW.Close()
	type readiness struct {
		n   int
		err error
	}
	ready := make(chan readiness, 1)
	go func() {
		// Ends when the binary writes to fd 5, closes it or exits; bounded below.
		n, rerr := readyR.Read(make([]byte, 1))
		ready <- readiness{n, rerr}
	}()
	select {
	case r := <-ready:
		readyR.Close()
		if r.err != nil && !errors.Is(r.err, io.EOF) {
			cmd.Process.Kill()
			return nil, nil, nil, fmt.Errorf("logging binary %s: %w", u.Path, r.err)
		}
		if u.Scheme == "binary-v2" && r.n == 0 {
			cmd.Process.Kill()
			return nil, nil, nil, fmt.Errorf("logging binary %s closed fd 5 without writing the byte binary-v2:// requires: it may have failed to start", u.Path)
		}
	case <-time.After(10 * time.Second):
		readyR.Close()
		cmd.Process.Kill()
		return nil, nil, nil, fmt.Errorf("logging binary %s did not get ready within 10s", u.Path)
	}
	return outW, errW, lg, nil
}

// loggerGrace is how long a logging binary has between SIGTERM and SIGKILL to flush what it
// holds and exit: containerd's shim gives 12s (binaryIOProcTermTimeout).
var loggerGrace = 12 * time.Second

// logger is a running logging binary.
type logger struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the monitor has collected its exit
}

// stop ends the logging binary as containerd's shim does (binaryIO.cancel): SIGTERM, and
// SIGKILL if it has not exited after loggerGrace. It returns once the binary has exited, so
// that a shim told to shut down next leaves no logger behind.
func (l *logger) stop() error {
	return l.end(true)
}

// awaitEOF ends the logging binary of a terminal: it has seen EOF and is left loggerGrace to
// exit by itself, then killed. containerd's shim never signals a terminal's logger
// (CopyConsole), so it is not sent SIGTERM, which could cut short its reading.
func (l *logger) awaitEOF() error {
	return l.end(false)
}

func (l *logger) end(term bool) error {
	select {
	case <-l.exited:
		return nil
	default:
	}
	var err error
	if term {
		err = l.cmd.Process.Signal(syscall.SIGTERM)
	}
	if err == nil {
		select {
		case <-l.exited:
			return nil
		case <-time.After(loggerGrace):
		}
	}
	// Not gone within the grace, or it could not be asked (it may have exited just now:
	// the signal then fails, and so does this).
	_ = l.cmd.Process.Kill()
	select {
	case <-l.exited:
		return nil
	case <-time.After(5 * time.Second):
		// Killed but not gone: stuck in the kernel (a hung mount, say). The monitor still
		// collects it whenever it ends.
		return fmt.Errorf("logging binary %s (pid %d) has not exited after SIGKILL", l.cmd.Path, l.cmd.Process.Pid)
	}
}

// binaryIO hands the container the write ends of the logging binary's pipes.
type binaryIO struct {
	out, err *os.File
}

func (b *binaryIO) Stdin() io.WriteCloser  { return nil }
func (b *binaryIO) Stdout() io.ReadCloser  { return nil }
func (b *binaryIO) Stderr() io.ReadCloser  { return nil }
func (b *binaryIO) Set(cmd *exec.Cmd)      { cmd.Stdout, cmd.Stderr = b.out, b.err }
func (b *binaryIO) CloseAfterStart() error { b.out.Close(); b.err.Close(); return nil }
func (b *binaryIO) Close() error           { b.out.Close(); b.err.Close(); return nil }

// CloseAfterStart closes the shim's copies of the pipe ends runc handed to the process. go-runc
// calls it once runc has started; without it the shim would keep every output pipe open and
// the readers would never see EOF.
func (p *Pipes) CloseAfterStart() error {
	if p.devNull != nil {
		// runc has handed it to the process; the shim's copy would stay open for its life.
		p.devNull.Close()
	}
	if c, ok := p.IO.(runc.StartCloser); ok {
		return c.CloseAfterStart()
	}
	return nil
}

// Wait blocks until every output copy is done: all the process wrote was delivered. Bounded by
// timeout, for a process that escaped the container with a copy of a pipe.
func (p *Pipes) Wait(timeout time.Duration) {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// CloseStdin ends the process's input (the CloseIO RPC): it closes the shim's writer of the
// stdin FIFO, and the process sees EOF once the clients have closed theirs.
func (p *Pipes) CloseStdin() error {
	if p.keeper == nil {
		return nil
	}
	// Closed already by an earlier CloseIO: stdin is closed, which is what was asked.
	if err := p.keeper.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// Close closes the pipes and what they were copied to, which ends every copy, and stops the
// logging binary: it may take up to loggerGrace.
func (p *Pipes) Close() error {
	for _, c := range p.closers {
		c.Close()
	}
	var err error
	if p.IO != nil {
		err = p.IO.Close()
	}
	if p.logger != nil {
		// The binary sees EOF on both pipes now; SIGTERM tells it not to wait for more.
		err = errors.Join(err, p.logger.stop())
	}
	return err
}
