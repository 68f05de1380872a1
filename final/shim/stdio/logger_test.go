// SPDX-License-Identifier: Apache-2.0

package stdio

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runc "github.com/containerd/go-runc"
)

// loggerFlag, as a key of a binary:// URI's query, makes the test binary a logging binary:
// the shim passes the query as arguments, and nothing else reaches the logger (not the
// environment the test helpers of testkit use).
const loggerFlag = "-stdio-test-logger"

func TestMain(m *testing.M) {
	// The query's keys come in no particular order.
	if i := slices.Index(os.Args, loggerFlag); i > 0 && i+1 < len(os.Args) {
		os.Exit(runLogger(os.Args[i+1]))
	}
	os.Exit(m.Run())
}

// runLogger is a logging binary. spec is MODE:FILE.
//   - env: writes its environment to FILE, then reads its stdout pipe (fd 3) to the end.
//   - byte: env, but says it is ready with a byte on fd 5 before closing it (binary-v2).
//   - args: writes its arguments to FILE, each ended by a NUL.
//   - term: writes "term" to FILE when SIGTERM comes, and exits 0.
//   - ignore: ignores SIGTERM and never exits by itself.
//
// Each says it is ready (closes fd 5) only once it is set up.
func runLogger(spec string) int {
	mode, file, _ := strings.Cut(spec, ":")
	ready := os.NewFile(5, "ready")
	switch mode {
	case "env", "byte":
		if err := os.WriteFile(file, []byte(strings.Join(os.Environ(), "\n")), 0o600); err != nil {
			return 1
		}
		if mode == "byte" {
			if _, err := ready.Write([]byte{1}); err != nil {
				return 1
			}
		}
		ready.Close()
		buf := make([]byte, 4096)
		out := os.NewFile(3, "stdout")
		for {
			if _, err := out.Read(buf); err != nil {
				return 0
			}
		}
	case "args":
		var b strings.Builder
		for _, a := range os.Args[1:] {
			b.WriteString(a + "\x00")
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			return 1
		}
		ready.Close()
		return 0
	case "term":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		ready.Close()
		<-term
		if err := os.WriteFile(file, []byte("term"), 0o600); err != nil {
			return 1
		}
		return 0
	case "ignore":
		signal.Ignore(syscall.SIGTERM)
		ready.Close()
		select {}
	}
	return 2
}

// cmdMonitor starts and waits for logging binaries as the shim's reaper does, and keeps how
// each ended.
type cmdMonitor struct {
	ended chan *os.ProcessState
}

func (m *cmdMonitor) Start(c *exec.Cmd) (chan runc.Exit, error) {
	if err := c.Start(); err != nil {
		return nil, err
	}
	ec := make(chan runc.Exit, 1)
	go func() {
		// Owned by the command: ends when it exits.
		_ = c.Wait()
		m.ended <- c.ProcessState
		ec <- runc.Exit{Pid: c.Process.Pid, Status: c.ProcessState.ExitCode()}
	}()
	return ec, nil
}

func (m *cmdMonitor) StartLocked(c *exec.Cmd) (chan runc.Exit, error) { return m.Start(c) }

func (m *cmdMonitor) Wait(c *exec.Cmd, ec chan runc.Exit) (int, error) {
	e := <-ec
	return e.Status, nil
}

// openLogger opens stdio whose output goes to this test binary as a logging binary in mode.
// It returns the file the logger writes and the monitor that saw it start.
func openLogger(t *testing.T, mode string) (*Pipes, string, *cmdMonitor) {
	t.Helper()
	p, file, m, err := openLoggerScheme(t, "binary", mode)
	if err != nil {
		t.Fatal(err)
	}
	return p, file, m
}

// openLoggerScheme is openLogger for a scheme of the binary logging protocol, returning Open's
// error.
func openLoggerScheme(t *testing.T, scheme, mode string) (*Pipes, string, *cmdMonitor, error) {
	t.Helper()
	return openLoggerQuery(t, scheme, mode, "")
}

// openLoggerQuery is openLoggerScheme with more of the query (a=b&c) after the logger's key.
func openLoggerQuery(t *testing.T, scheme, mode, query string) (*Pipes, string, *cmdMonitor, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "logger-out")
	uri := scheme + "://" + self + "?" + loggerFlag + "=" + mode + ":" + file
	if query != "" {
		uri += "&" + query
	}
	m := &cmdMonitor{ended: make(chan *os.ProcessState, 1)}
	p, err := Open(Config{Stdout: uri, Stderr: uri}, "ctr-id", "ns-test", 0, 0, m)
	return p, file, m, err
}

// ended waits for the logging binary's exit, which Close should already have brought about.
func (m *cmdMonitor) exit(t *testing.T) *os.ProcessState {
	t.Helper()
	select {
	case st := <-m.ended:
		return st
	case <-time.After(10 * time.Second):
		t.Fatal("the logging binary has not exited")
		return nil
	}
}

// TestLoggerEnvironment: a logging binary gets the container's id and namespace and nothing
// of the shim's environment, which holds containerd's own (proxy credentials, secrets set for
// the service) and the addresses of containerd's APIs.
func TestLoggerEnvironment(t *testing.T) {
	t.Setenv("TTRPC_ADDRESS", "/run/containerd/containerd.sock.ttrpc")
	t.Setenv("GRPC_ADDRESS", "/run/containerd/containerd.sock")
	t.Setenv("HTTPS_PROXY", "http://user:secret@proxy:3128")
	p, file, m := openLogger(t, "env")
	data, err := os.ReadFile(file) // written before it said it was ready
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	m.exit(t)
	got := strings.Split(string(data), "\n")
	slices.Sort(got)
	want := []string{"CONTAINER_ID=ctr-id", "CONTAINER_NAMESPACE=ns-test"}
	if !slices.Equal(got, want) {
		t.Errorf("the logging binary's environment is\n%s\nwant only\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoggerStoppedWithSIGTERM: closing a process's stdio asks the logging binary to stop with
// SIGTERM, so that it can flush what it holds, and waits for it.
func TestLoggerStoppedWithSIGTERM(t *testing.T) {
	p, file, m := openLogger(t, "term")
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	// Close has waited for the logger: what it did on SIGTERM is done.
	data, err := os.ReadFile(file)
	if err != nil || string(data) != "term" {
		t.Errorf("the logging binary did not get SIGTERM (%q, %v)", data, err)
	}
	if st := m.exit(t); !st.Success() {
		t.Errorf("the logging binary ended with %v, want its own exit 0", st)
	}
}

// TestLoggerKilledAfterGrace: a logging binary that ignores SIGTERM is killed once the grace
// period is over, and Close returns only then.
func TestLoggerKilledAfterGrace(t *testing.T) {
	defer func(g time.Duration) { loggerGrace = g }(loggerGrace)
	loggerGrace = 200 * time.Millisecond // containerd's 12s would make a slow test
	p, _, m := openLogger(t, "ignore")
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case st := <-m.ended:
		ws, ok := st.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the logging binary ended with %v, want SIGKILL", st)
		}
	default:
		t.Error("Close returned while the logging binary still ran")
		m.exit(t)
	}
}

// TestLoggerFailsToStart: a logging binary that cannot run is an error of Open, with its path.
func TestLoggerFailsToStart(t *testing.T) {
	m := &cmdMonitor{ended: make(chan *os.ProcessState, 1)}
	_, err := Open(Config{Stdout: "binary:///nonexistent/logger"}, "id", "ns", 0, 0, m)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/logger") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open with a missing logging binary: %v", err)
	}
}

// TestLoggerReadiness: binary:// takes a closed fd 5 for ready, with or without a byte written
// first; binary-v2:// requires the byte, and a logger that closes fd 5 without it is an error of
// Open, which leaves no logger running.
func TestLoggerReadiness(t *testing.T) {
	for _, c := range []struct {
		scheme, mode string
		ok           bool
	}{
		{"binary", "env", true},
		{"binary", "byte", true},
		{"binary-v2", "byte", true},
		{"binary-v2", "env", false},
	} {
		t.Run(c.scheme+"-"+c.mode, func(t *testing.T) {
			p, _, m, err := openLoggerScheme(t, c.scheme, c.mode)
			if c.ok {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if err := p.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			} else if err == nil {
				p.Close()
				t.Fatal("Open succeeded with a logger that never wrote the ready byte")
			} else if !strings.Contains(err.Error(), "binary-v2") {
				t.Errorf("Open: %v; want an error that names what binary-v2 requires", err)
			}
			m.exit(t)
		})
	}
}

// TestLoggerArguments: the URI's query becomes the logging binary's arguments, each key followed
// by its first value, and by an empty argument when it has none, as containerd's shim does.
func TestLoggerArguments(t *testing.T) {
	p, file, m, err := openLoggerQuery(t, "binary", "args", "flag&to=%2Fvar%2Flog")
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	m.exit(t)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	pairs := map[string]string{}
	for i := 0; i+1 < len(args); i += 2 {
		pairs[args[i]] = args[i+1]
	}
	if len(args) != 6 || pairs["flag"] != "" || pairs["to"] != "/var/log" || pairs[loggerFlag] == "" {
		t.Errorf("the logging binary's arguments are %q; want key, value pairs for %s, flag (empty) and to", args, loggerFlag)
	}
}
