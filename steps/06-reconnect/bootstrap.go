// SPDX-License-Identifier: Apache-2.0

// The two-exec bootstrap (since step 01). `start` opens the socket and re-executes the shim to serve it;
// `delete` stops that shim (and, since step 06, cleans up after its container). Mirrors Start and Stop in containerd v2.4
// cmd/containerd-shim-runc-v2/manager/manager_linux.go and the socket helpers in pkg/shim/util_unix.go;
// unlike containerd, the socket name hashes only namespace and id, under SHIMWALK_SOCKET_DIR.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const defaultSocketDir = "/run/shimwalk/s"

// socketPath is where the shim for namespace/id listens. The name is a hash so that any id fits
// within the 108-byte limit of a unix socket path.
func socketPath(namespace, id string) string {
	dir := os.Getenv("SHIMWALK_SOCKET_DIR")
	if dir == "" {
		dir = defaultSocketDir
	}
	sum := sha256.Sum256([]byte(namespace + "/" + id))
	return filepath.Join(dir, hex.EncodeToString(sum[:]))
}

// start is the short-lived helper. It must return quickly: containerd waits for its stdout.
func start(o options) error {
	path := socketPath(o.namespace, o.id)
	address := "unix://" + path
	ln, err := listen(path)
	if errors.Is(err, unix.EADDRINUSE) {
		// A shim for this task already serves here: hand containerd the same address.
		tracePoint("helper", "", false, "a shim already serves the socket: prints its address")
		return writeAddress(address)
	}
	if err != nil {
		return err
	}
	defer ln.Close()
	tracePoint("helper", "", false, "binds the socket (0600)")

	f, err := ln.File()
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("socket file descriptor: %w", err)
	}
	defer f.Close()

	self, err := os.Executable()
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("find own executable: %w", err)
	}
	args := []string{"-namespace", o.namespace, "-id", o.id, "-address", o.address}
	if o.publishBinary != "" {
		args = append(args, "-publish-binary", o.publishBinary)
	}
	if o.debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	// The long-lived shim inherits the listener as fd 3 and no stdio: containerd reads the helper's
	// stdout to EOF, which a child holding it open would delay forever.
	cmd.ExtraFiles = []*os.File{f}
	// Its own process group keeps a terminal's Ctrl-C, aimed at the caller, away from the shim.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("start long-lived shim: %w", err)
	}
	pid := cmd.Process.Pid
	tracePoint("helper", "shim", false, "re-exec: listener as fd 3, no stdio, Setpgid")
	// containerd 1.6 reads address when it reconnects to running shims after a restart.
	err = writeFile("shim.pid", strconv.Itoa(pid))
	if err == nil {
		err = writeFile("address", address)
	}
	if err != nil {
		// Nobody will learn of this shim: stop it and take its socket, or both would stay, and
		// the records, which would name a dead shim.
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		_ = os.Remove(path)
		_ = os.Remove("shim.pid")
		_ = os.Remove("address")
		return err
	}
	// The helper exits without waiting for the child; it is re-parented and lives on.
	_ = cmd.Process.Release()
	tracePoint("helper", "", false, "writes shim.pid, prints the address, exits")
	return writeAddress(address)
}

// listen creates the socket 0600, and what is missing of the socket directory 0700. A directory
// that exists keeps its mode, as containerd's NewSocket leaves it: it may be /tmp, or the
// socket_dir containerd 2.3+ made for its own use. A socket file nobody listens on is a leftover
// of a dead shim and is replaced; a live one yields EADDRINUSE.
func listen(path string) (*net.UnixListener, error) {
	if err := makeSocketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	ln, err := listenUnix(path)
	if errors.Is(err, unix.EADDRINUSE) {
		if conn, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
			conn.Close()
			return nil, err
		}
		if rerr := os.Remove(path); rerr != nil {
			return nil, fmt.Errorf("remove stale socket: %w", rerr)
		}
		ln, err = listenUnix(path)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// makeSocketDir creates what is missing of dir, each new directory 0700, and then refuses dir,
// and each directory it had to create, unless it is a real directory of the shim's own uid: a
// symlink, or a directory another user made first, would let someone else put a socket of
// theirs at the predictable name, and containerd would dial it as the shim.
func makeSocketDir(dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("socket directory: %w", err)
		}
		missing = append(missing, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		// EEXIST: someone made it since the look above; the check below decides.
		if err := os.Mkdir(missing[i], 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create socket directory: %w", err)
		}
	}
	if len(missing) == 0 || missing[0] != dir {
		missing = append(missing, dir)
	}
	for _, p := range missing {
		if err := ownDirectory(p); err != nil {
			return err
		}
	}
	return nil
}

// ownDirectory refuses p unless it is a directory, not a symlink, of the shim's own uid.
func ownDirectory(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("socket directory: %w", &os.PathError{Op: "lstat", Path: p, Err: err})
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("socket directory %s is a symlink", p)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("socket directory %s is not a directory", p)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("socket directory %s belongs to uid %d, not to the shim's uid %d", p, st.Uid, os.Geteuid())
	}
	return nil
}

func listenUnix(path string) (*net.UnixListener, error) {
	// The umask makes the socket 0600 from the moment it exists: a chmod afterwards would leave a
	// window in which another user could connect.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	// The long-lived shim owns the socket file; closing our copy must not unlink it.
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// writeAddress prints the address in the form the caller reads: containerd 1.7 and later set
// MAX_SHIM_VERSION and read JSON; containerd 1.6 reads nothing but the bare address.
func writeAddress(address string) error {
	if os.Getenv("MAX_SHIM_VERSION") == "" {
		_, err := fmt.Fprint(os.Stdout, address)
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(struct {
		Version  int    `json:"version"`
		Address  string `json:"address"`
		Protocol string `json:"protocol"`
	}{2, address, "ttrpc"})
}

// writeFile replaces name in the working directory (the bundle) atomically. Neither the
// temporary file nor name is followed if it is a symlink: rename replaces a link, never its
// target, and the temporary file is created afresh.
func writeFile(name, data string) error {
	tmp := name + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.WriteString(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// inheritedListener is the socket the helper passed as fd 3.
func inheritedListener() (*net.UnixListener, error) {
	f := os.NewFile(3, "shim socket")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listener on fd 3: %w", err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("fd 3 is a %T, not a unix listener", ln)
	}
	tracePoint("shim", "", false, "serves the listener it found as fd 3")
	return ul, nil
}

// openLog returns where the long-lived shim logs: the bundle's `log` FIFO that containerd reads,
// or shim.log in the bundle when nobody created one.
func openLog(debug bool) (*slog.Logger, *os.File, error) {
	f, err := openLogFIFO("log")
	if err != nil {
		f, err = os.OpenFile("shim.log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("open shim.log: %w", err)
		}
	}
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: level})), f, nil
}

// openLogFIFO opens the FIFO without blocking: with no reader the open fails with ENXIO instead
// of hanging the shim, and the shim falls back to a file. What is checked is what is opened: the
// name is opened once, as an O_PATH handle that does not follow a symlink, the handle is checked,
// and the FIFO is reopened through it (/proc/self/fd), as containerd/fifo opens one. Checking the
// name and then opening the name again would follow a symlink swapped in between, and the shim
// (root) would write its log into whatever file the link names.
func openLogFIFO(name string) (*os.File, error) {
	h, err := unix.Open(name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(h)
	var st unix.Stat_t
	if err := unix.Fstat(h, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s is not a FIFO", name)
	}
	if testLogFIFOChecked != nil {
		testLogFIFOChecked()
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", h), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	// Writes block once the reader is attached, rather than failing with EAGAIN on a full pipe.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// testLogFIFOChecked, set by a test, runs between the check of the log FIFO and its open.
var testLogFIFOChecked func()

// stopGrace is how long the delete action waits for a shim after SIGTERM, and again after
// SIGKILL. containerd gives the whole action 5 s (cleanupTimeout, core/runtime/v2/shim.go) and
// then kills it: whatever the action has not done by then stays undone.
const stopGrace = 2 * time.Second

// deleteShim is the `delete` action: containerd runs it to clean up after a shim it can no longer
// reach. It always succeeds for an unknown id, so that containerd can forget the task. Unlike
// containerd's runc shim, whose manager.Stop sends the shim no signal (containerd ends a shim
// with the Shutdown RPC), it also stops a shim still alive: step 01 has no Shutdown RPC, and the
// driver counts on it for a shim that ignored Shutdown. final/ leaves a live shim alone.
func deleteShim(o options) error {
	bundle := o.bundle
	if bundle == "" {
		bundle = "."
	}
	// The container first: it is what containerd runs this action for, and a hung shim must not
	// use up the time containerd allows before the container is killed and unmounted. A failure
	// is reported, not returned: containerd would take a failed action's exit for the task's
	// (255) and keep the bundle, while exit.json knows the real one. containerd's runc shim
	// (manager.Stop) logs it and goes on too; containerd logs the action's stderr as a warning.
	if err := cleanupContainer(o.namespace, o.id, bundle); err != nil {
		fmt.Fprintf(os.Stderr, "delete %s: cleanup incomplete, reporting the recorded exit: %v\n", o.id, err)
	}
	pidFile := filepath.Join(bundle, "shim.pid")
	if pid, err := readPid(pidFile); err == nil && isShim(pid, o.id) {
		tracePoint("helper", "shim", false, "SIGTERM, then waits on a pidfd")
		if err := stopProcess(pid, stopGrace); err != nil {
			return fmt.Errorf("stop shim %d: %w", pid, err)
		}
	}
	for _, p := range []string{socketPath(o.namespace, o.id), pidFile, filepath.Join(bundle, "address")} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clean up: %w", err)
		}
	}
	e := recoverExit(bundle)
	resp := &taskapi.DeleteResponse{Pid: uint32(e.Pid), ExitStatus: uint32(e.ExitStatus), ExitedAt: timestamppb.New(e.ExitedAt)}
	data, err := proto.Marshal(resp)
	if err != nil {
		return fmt.Errorf("marshal delete response: %w", err)
	}
	_, err = os.Stdout.Write(data)
	return err
}

func readPid(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("bad pid in %s: %q", path, data)
	}
	return pid, nil
}

// isShim guards against a recycled pid: the process must be this binary serving this id.
func isShim(pid int, id string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	self, err := os.Executable()
	if err != nil || filepath.Base(args[0]) != filepath.Base(self) {
		return false
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-id" && args[i+1] == id {
			return args[len(args)-1] != "start" && args[len(args)-1] != "delete"
		}
	}
	return false
}

// stopProcess sends SIGTERM, then SIGKILL after the grace period, and waits until the process is
// gone. The shim is not our child, so a pidfd is how we learn that it exited.
func stopProcess(pid int, grace time.Duration) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGTERM, nil, 0); err != nil {
		return nil // already gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if waitPidfd(ctx, pidfd) {
		return nil
	}
	_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), grace)
	defer cancel2()
	if !waitPidfd(ctx2, pidfd) {
		return fmt.Errorf("still alive after SIGKILL")
	}
	return nil
}

// waitPidfd reports whether the process behind pidfd exited before ctx ended.
func waitPidfd(ctx context.Context, pidfd int) bool {
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		if ctx.Err() != nil {
			return false
		}
	}
}
