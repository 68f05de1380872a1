// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// startShim creates a bundle for id and runs start through the driver.
func startShim(t *testing.T, d *driver.Driver, id string) (driver.Bootstrap, int) {
	t.Helper()
	if _, err := d.CreateBundle(id); err != nil {
		t.Fatal(err)
	}
	b, err := d.StartShim(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DeleteShim(context.Background(), id) })
	return b, testkit.ReadPid(t, filepath.Join(d.Bundle(id), "shim.pid"))
}

func TestStartDaemonizes(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "daemon")

	// The helper returned, and its output ended (StartShim waits for both, the output at most a
	// second after the exit), while the shim it started lives on: it did not wait for the shim.
	if !driver.Alive(pid) {
		t.Fatalf("long-lived shim %d is not running", pid)
	}
	st, err := driver.ReadProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPid == os.Getpid() {
		t.Errorf("shim's parent is the test process; it should have been re-parented")
	}
	if st.Pgid != pid {
		t.Errorf("shim pgid = %d, want its own pid %d (a process group of its own)", st.Pgid, pid)
	}
	if got := shimPidAt(t, b); got != pid {
		t.Errorf("the address reaches pid %d, want %d", got, pid)
	}
	if addr, _ := os.ReadFile(filepath.Join(d.Bundle("daemon"), "address")); string(addr) != b.Address {
		t.Errorf("address file = %q, want %q", addr, b.Address)
	}
}

func TestSocketPermissions(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, _ := startShim(t, d, "perms")
	sock, err := os.Lstat(b.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if sock.Mode()&os.ModeSocket == 0 || sock.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket with 0600", sock.Mode())
	}
	dir, err := os.Stat(filepath.Dir(b.SocketPath()))
	if err != nil {
		t.Fatal(err)
	}
	if dir.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode = %v, want 0700", dir.Mode().Perm())
	}
	if filepath.Dir(b.SocketPath()) != testkit.SocketDir(d) {
		t.Errorf("socket %s is not in SHIMWALK_SOCKET_DIR %s", b.SocketPath(), testkit.SocketDir(d))
	}
}

// TestExistingSocketDirIsLeftAlone: a socket directory that exists (/tmp, or containerd's own
// socket_dir) keeps its mode; only one the shim creates is made 0700.
func TestExistingSocketDirIsLeftAlone(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	dir := testkit.SocketDir(d)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	startShim(t, d, "shared")
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("the existing socket directory became %v, want it left 0755", st.Mode().Perm())
	}
}

// TestFailedStartLeavesNoShim: when the helper cannot write shim.pid, start fails, and neither
// the shim it started nor the socket stays behind: nobody would ever learn of them.
func TestFailedStartLeavesNoShim(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	bundle, err := d.CreateBundle("unwritable")
	if err != nil {
		t.Fatal(err)
	}
	// writeFile cannot clear a non-empty directory in the way of its temporary file.
	if err := os.MkdirAll(filepath.Join(bundle, "shim.pid.tmp", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StartShim(context.Background(), "unwritable", nil); err == nil {
		t.Error("start succeeded without shim.pid")
	}
	bin := shimBinary(t)
	left := driver.ProcessesWhere(func(args []string) bool {
		return args[0] == bin && slices.Contains(args, "unwritable") && !slices.Contains(args, "start")
	})
	for _, pid := range left {
		t.Errorf("shim %d left running", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if entries, _ := os.ReadDir(testkit.SocketDir(d)); len(entries) > 0 {
		t.Errorf("socket directory holds %v", entries)
	}
}

func TestSecondStartReusesShim(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	first, pid := startShim(t, d, "twice")
	second, err := d.StartShim(context.Background(), "twice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Address != first.Address {
		t.Errorf("second start returned %s, want %s", second.Address, first.Address)
	}
	if got := testkit.ReadPid(t, filepath.Join(d.Bundle("twice"), "shim.pid")); got != pid {
		t.Errorf("shim.pid changed from %d to %d: a second shim was started", pid, got)
	}
	if got := shimPidAt(t, second); got != pid {
		t.Errorf("the address reaches pid %d, want %d", got, pid)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "stale")
	// Kill the shim without letting it clean up: its socket file stays, with no listener.
	syscall.Kill(pid, syscall.SIGKILL)
	testkit.ExpectGone(t, pid, "killed shim")
	if _, err := os.Lstat(b.SocketPath()); err != nil {
		t.Fatalf("socket should be left behind by SIGKILL: %v", err)
	}
	again, err := d.StartShim(context.Background(), "stale", nil)
	if err != nil {
		t.Fatalf("start over a stale socket: %v", err)
	}
	newPid := testkit.ReadPid(t, filepath.Join(d.Bundle("stale"), "shim.pid"))
	if newPid == pid {
		t.Fatal("no new shim was started")
	}
	if got := shimPidAt(t, again); got != newPid {
		t.Errorf("the address reaches pid %d, want the new shim %d", got, newPid)
	}
}

func TestDeleteCleansUp(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "gone")
	resp, err := d.DeleteShim(context.Background(), "gone")
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetExitedAt() == nil || resp.GetExitStatus() != 137 {
		t.Errorf("delete response = %v, want exit status 137 and a time", resp)
	}
	// delete waits for the shim: it must be gone when delete returns, not some time later.
	if driver.Alive(pid) {
		t.Errorf("shim %d still running after delete", pid)
	}
	for _, p := range []string{b.SocketPath(), filepath.Join(d.Bundle("gone"), "shim.pid")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind after delete", p)
		}
	}
	// Deleting again, and deleting an id that never existed, still succeeds.
	if _, err := d.DeleteShim(context.Background(), "gone"); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if _, err := d.CreateBundle("never"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteShim(context.Background(), "never"); err != nil {
		t.Errorf("delete of an unknown id: %v", err)
	}
}

func TestOutputForm(t *testing.T) {
	t.Parallel()
	bin := shimBinary(t)
	dir := testkit.TempDir(t)
	env := []string{"SHIMWALK_SOCKET_DIR=" + filepath.Join(dir, "s")}
	args := []string{"-namespace", "test", "-id", "form", "-address", "/none"}

	// containerd 1.6 sets no MAX_SHIM_VERSION and reads the bare address.
	bare := testkit.Run(t, dir, env, bin, append(args, "start")...)
	t.Cleanup(func() { testkit.Run(t, dir, env, bin, append(args, "-bundle", dir, "delete")...) })
	if bare.Code != 0 || !strings.HasPrefix(bare.Stdout, "unix://") || strings.ContainsAny(bare.Stdout, "{\n") {
		t.Fatalf("start without MAX_SHIM_VERSION printed %q (exit %d, %s)", bare.Stdout, bare.Code, bare.Stderr)
	}
	// containerd 1.7 and later read JSON.
	js := testkit.Run(t, dir, append(env, "MAX_SHIM_VERSION=2"), bin, append(args, "start")...)
	var reply driver.Bootstrap
	if err := json.Unmarshal([]byte(js.Stdout), &reply); err != nil {
		t.Fatalf("start with MAX_SHIM_VERSION printed %q: %v", js.Stdout, err)
	}
	if reply != (driver.Bootstrap{Version: 2, Address: bare.Stdout, Protocol: "ttrpc"}) {
		t.Errorf("JSON reply = %+v, want version 2, ttrpc, %s", reply, bare.Stdout)
	}
}

func TestLogDestination(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))

	// No log FIFO: the shim writes shim.log in the bundle.
	startShim(t, d, "logfile")
	testkit.Eventually(t, 5*time.Second, "shim.log has the serving line", func() bool {
		data, _ := os.ReadFile(filepath.Join(d.Bundle("logfile"), "shim.log"))
		return strings.Contains(string(data), "msg=serving")
	})

	// A log FIFO with a reader, as containerd makes it: the shim logs into it instead.
	bundle, err := d.CreateBundle("logfifo")
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(bundle, "log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write, so that reads wait for the shim's lines instead of seeing EOF before it opens.
	r, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := d.StartShim(context.Background(), "logfifo", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DeleteShim(context.Background(), "logfifo") })
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, "msg=serving") {
		t.Errorf("log FIFO gave %q, %v; want the serving line", line, err)
	}
	if _, err := os.Stat(filepath.Join(bundle, "shim.log")); !os.IsNotExist(err) {
		t.Errorf("shim.log written although a log FIFO was there")
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	bin := shimBinary(t)
	long := strings.Repeat("a", 77)
	cases := []struct {
		name string
		args []string
		want string // in the error line
	}{
		{"no id", []string{"-namespace", "test", "start"}, "-id is required"},
		{"no namespace", []string{"-id", "x", "start"}, "-namespace is required"},
		{"slash", []string{"-namespace", "test", "-id", "a/b", "start"}, `'/'`},
		{"dotdot", []string{"-namespace", "test", "-id", "..", "start"}, "must stand between"},
		{"dotdot inside", []string{"-namespace", "test", "-id", "a..b", "start"}, "must stand between"},
		{"too long", []string{"-namespace", "test", "-id", long, "start"}, "longer than 76"},
		{"bad namespace", []string{"-namespace", "../etc", "-id", "x", "start"}, "namespace"},
		{"unknown action", []string{"-namespace", "test", "-id", "x", "launch"}, `unknown action "launch"`},
		{"unknown flag", []string{"-namespace", "test", "-id", "x", "-frobnicate", "start"}, "frobnicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := testkit.TempDir(t)
			sockDir := filepath.Join(dir, "s")
			r := testkit.Run(t, dir, []string{"SHIMWALK_SOCKET_DIR=" + sockDir}, bin, tc.args...)
			if r.Code == 0 {
				t.Fatalf("exit 0, want failure; stdout %q", r.Stdout)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("stderr = %q, want one line containing %q", r.Stderr, tc.want)
			}
			if r.Stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.Stdout)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("bad input created %v", entries)
			}
		})
	}
}

// TestSocketDirMustBeTheShims: a socket directory that is a symlink, or that belongs to another
// user, is refused: whoever controls it could put a socket of theirs at the name containerd
// dials.
func TestSocketDirMustBeTheShims(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t) // to give a directory to another uid
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, base string) string // returns SHIMWALK_SOCKET_DIR
	}{
		{"symlink", func(t *testing.T, base string) string {
			real := filepath.Join(base, "real")
			if err := os.Mkdir(real, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(base, "link")
		}},
		{"other user", func(t *testing.T, base string) string {
			dir := filepath.Join(base, "theirs")
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, os.Geteuid()+1, os.Getegid()); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testkit.NewDriver(t, shimBinary(t))
			// A short base: t.TempDir's name would make the socket path too long to bind.
			base, err := os.MkdirTemp("", "sd")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			dir := tc.setup(t, base)
			d.Env = append(d.Env, "SHIMWALK_SOCKET_DIR="+dir)
			if _, err := d.CreateBundle("baddir"); err != nil {
				t.Fatal(err)
			}
			if _, err := d.StartShim(context.Background(), "baddir", nil); err == nil {
				d.DeleteShim(context.Background(), "baddir")
				t.Fatalf("start listened in %s", dir)
			} else if !strings.Contains(err.Error(), "socket directory") {
				t.Errorf("start failed with %v, want it to name the socket directory", err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) > 0 {
				t.Errorf("%s holds %v", dir, entries)
			}
		})
	}
}

// TestLogFIFOIsOpenedOnce: the long-lived shim checks that the bundle's `log` is a FIFO and
// opens it for writing. If the name can be swapped for a symlink between the check and the
// open, the shim, root, writes its log to whatever the link names. testLogFIFOChecked runs at
// that point and swaps it, so the race is certain.
func TestLogFIFOIsOpenedOnce(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	if err := syscall.Mkfifo(log, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(log, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	testLogFIFOChecked = func() {
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
}

// TestFailedStartLeavesNoRecords: when the helper wrote shim.pid but cannot write address, the
// shim it started is stopped, and shim.pid, which would name that dead shim, goes with it.
func TestFailedStartLeavesNoRecords(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	bundle, err := d.CreateBundle("noaddress")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(bundle, "address.tmp", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StartShim(context.Background(), "noaddress", nil); err == nil {
		d.DeleteShim(context.Background(), "noaddress")
		t.Fatal("start succeeded without address")
	}
	for _, name := range []string{"shim.pid", "address"} {
		if _, err := os.Lstat(filepath.Join(bundle, name)); err == nil {
			t.Errorf("%s left in the bundle", name)
		}
	}
	if entries, _ := os.ReadDir(testkit.SocketDir(d)); len(entries) > 0 {
		t.Errorf("socket directory holds %v", entries)
	}
}
