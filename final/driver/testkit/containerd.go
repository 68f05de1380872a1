// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Containerd is a private containerd for one test process: its root, state, sockets and the
// shims' socket directory all live under Dir, so it never meets the system's containerd.
type Containerd struct {
	Dir          string
	Address      string // gRPC socket, for ctr
	TTRPCAddress string
	SocketDir    string // SHIMWALK_SOCKET_DIR of the shims it starts
	RuncRoot     string // SHIMWALK_RUNC_ROOT of the shims it starts
	Namespace    string
	Binary       string // the containerd executable

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

var (
	ctdMu sync.Mutex
	ctd   *Containerd // guarded by ctdMu; stopped by Main
)

// StartContainerd returns the test process's private containerd (Debian's, from PATH), starting
// it on first use. It lives until the package's tests are done.
func StartContainerd(t testing.TB) *Containerd {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "containerd", "ctr", "runc")
	ctdMu.Lock()
	defer ctdMu.Unlock()
	if ctd != nil {
		return ctd
	}
	bin, _ := exec.LookPath("containerd")
	dir := filepath.Join(WorkDir(t), "ctd")
	c := &Containerd{
		Dir:          dir,
		Address:      filepath.Join(dir, "c.sock"),
		TTRPCAddress: filepath.Join(dir, "c.sock.ttrpc"),
		SocketDir:    filepath.Join(dir, "s"),
		RuncRoot:     RuncRoot(t),
		// ctr puts containers in the cgroup /<namespace>/<id>, which test processes running
		// side by side would otherwise share.
		Namespace: fmt.Sprintf("shimwalk-test-%d", os.Getpid()),
		Binary:    bin,
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(c.config()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	ctd = c
	return c
}

// config keeps containerd small: no CRI, no snapshotters that this machine cannot run.
func (c *Containerd) config() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  level = "debug"

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), c.Address, c.TTRPCAddress,
		filepath.Join(c.Dir, "opt"))
}

func (c *Containerd) start() error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.Binary, "--config", filepath.Join(c.Dir, "config.toml"))
	cmd.Env = append(os.Environ(), "SHIMWALK_SOCKET_DIR="+c.SocketDir, "SHIMWALK_RUNC_ROOT="+c.RuncRoot)
	cmd.Stdout, cmd.Stderr = logf, logf
	// containerd and the shims it starts must not get the test's terminal signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func() {
		// Owned by c: stop and kill wait on done.
		cmd.Wait()
		close(c.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := exec.CommandContext(ctx, "ctr", "--address", c.Address, "version").Run()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("containerd exited at start; see %s", logf.Name())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd did not answer within 30s; see %s", logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops containerd with SIGKILL, as a crash would; the shims it started live on.
func (c *Containerd) Kill(t testing.TB) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Restart starts containerd again on the same configuration after Kill.
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
}

func stopContainerd() {
	ctdMu.Lock()
	defer ctdMu.Unlock()
	if ctd == nil {
		return
	}
	_ = ctd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ctd.done:
	case <-time.After(10 * time.Second):
		_ = ctd.cmd.Process.Signal(syscall.SIGKILL)
		<-ctd.done
	}
	// containerd leaves shims running by design; whatever a test left is killed here, and each
	// test asserts on its own shims before it ends.
	for _, pid := range shimsOf(ctd.Address) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	ctd = nil
}

// Ctr runs ctr against this containerd in its test namespace.
func (c *Containerd) Ctr(t testing.TB, args ...string) Result {
	t.Helper()
	full := append([]string{"--address", c.Address, "--namespace", c.Namespace}, args...)
	return Run(t, "", nil, "ctr", full...)
}

// Bundle is where containerd keeps the bundle of task id.
func (c *Containerd) Bundle(id string) string {
	return filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", c.Namespace, id)
}

// Shims lists the long-lived shim processes this containerd started for id ("" for any).
func (c *Containerd) Shims(id string) []int {
	var pids []int
	for _, pid := range shimsOf(c.Address) {
		if id == "" || hasArgs(pid, "-id", id) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// shimsOf finds processes started with -address address that are not a start or delete helper.
func shimsOf(address string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !Alive(pid) {
			continue
		}
		args := cmdline(pid)
		if len(args) > 1 && hasArgs(pid, "-address", address) &&
			args[len(args)-1] != "start" && args[len(args)-1] != "delete" {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

func hasArgs(pid int, flag, value string) bool {
	args := cmdline(pid)
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}
