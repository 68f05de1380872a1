// SPDX-License-Identifier: Apache-2.0

// The start action: the group the container joins, the socket, the long-lived shim spawned on
// it and the reply in the form the calling containerd reads, as containerd v2.4's runc shim
// does in manager.Start and newShimSocket (cmd/containerd-shim-runc-v2/manager/manager_linux.go).

package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/internal/identifiers"
	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/process"
)

// defaultSocketDir is where sockets go when neither containerd (socket_dir) nor the
// environment (SHIMWALK_SOCKET_DIR) says otherwise.
const defaultSocketDir = "/run/shimwalk/s"

// groupLabels are the spec annotations that put containers into one shim, first match wins.
var groupLabels = []string{"io.containerd.shimwalk.v2.group", "io.kubernetes.cri.sandbox-id"}

// request is what start learned from its caller.
type request struct {
	bootstrap bool // containerd 2.3+: BootstrapParams in, BootstrapResult out
	socketDir string
	// grpcAddress is containerd's own address, part of the socket's name: shims of two
	// containerds on one host never meet, even for the same namespace and id.
	grpcAddress string
	shimCgroup  string // the ShimCgroup runtime option: where the long-lived shim goes
}

// readRequest reads start's stdin: BootstrapParams from containerd 2.3 and later, the runtime
// options as an Any (or nothing) from earlier ones. Both begin with a string in field 1, so
// BootstrapParams is recognised by carrying this very instance id and namespace.
func readRequest(f flags, in []byte) (request, error) {
	r := request{socketDir: os.Getenv("SHIMWALK_SOCKET_DIR"), grpcAddress: f.address}
	var (
		params bootapi.BootstrapParams
		err    error
	)
	if len(in) > 0 && proto.Unmarshal(in, &params) == nil && params.GetInstanceID() == f.id && params.GetNamespace() == f.namespace {
		r.bootstrap = true
		if d := params.GetSocketDir(); d != "" {
			r.socketDir = d
		}
		r.grpcAddress = params.GetContainerdGrpcAddress()
		for _, ext := range params.GetExtensions() {
			// Extensions are sections of any kind (CRI, NRI, sandbox configuration), found by
			// type, as containerd's runc shim finds its options with FindExtension. Only the
			// runtime options are the shim's to read and refuse; options of a type it does not
			// know are refused by Create, which receives them again.
			if !process.IsOptions(ext.GetValue()) {
				continue
			}
			_, cg, err := process.ParseOptions(ext.GetValue())
			if err != nil {
				return r, err
			}
			if cg != "" {
				r.shimCgroup = cg
			}
		}
	} else if len(in) > 0 {
		var opts anypb.Any
		if err := proto.Unmarshal(in, &opts); err != nil {
			return r, fmt.Errorf("stdin is neither BootstrapParams nor runtime options: %w", err)
		}
		if _, r.shimCgroup, err = process.ParseOptions(&opts); err != nil {
			return r, err
		}
	}
	if r.socketDir == "" {
		r.socketDir = defaultSocketDir
	}
	if !filepath.IsAbs(r.socketDir) {
		return r, fmt.Errorf("socket directory %q is not absolute", r.socketDir)
	}
	return r, nil
}

// group is the id that names the shim: the container's own, or the group annotation of its
// spec, so that a pod's containers share one shim.
func group(f flags) (string, error) {
	// Bounded: the spec is read whole, and this runs before anything else has checked it. No
	// spec yet means no annotations: the shim is this container's alone.
	annotations, err := bundle.ReadAnnotations(".")
	if err != nil {
		return "", err
	}
	for _, label := range groupLabels {
		if g, ok := annotations[label]; ok && g != "" {
			if err := identifiers.Validate(label, g); err != nil {
				return "", err
			}
			return g, nil
		}
	}
	return f.id, nil
}

// socketPath names the socket of a shim by a hash, short enough for the 108-byte limit, of
// containerd's address, the namespace and the group, joined as paths: the derivation of
// CreateSocketAddress in containerd's pkg/shim, so that a shim is found where containerd's
// runc shim would be, and two containerds sharing a socket directory never share a shim.
func socketPath(dir, grpcAddress, namespace, group string) string {
	sum := sha256.Sum256([]byte(filepath.Join(grpcAddress, namespace, group)))
	return filepath.Join(dir, hex.EncodeToString(sum[:]))
}

// start is the short-lived helper. It must print nothing but the reply: containerd reads its
// stdout and stderr together.
func start(f flags) error {
	in, err := io.ReadAll(io.LimitReader(os.Stdin, 4<<20))
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	req, err := readRequest(f, in)
	if err != nil {
		return err
	}
	g, err := group(f)
	if err != nil {
		return err
	}
	path := socketPath(req.socketDir, req.grpcAddress, f.namespace, g)
	address := "unix://" + path
	ln, err := listen(path)
	if errors.Is(err, unix.EADDRINUSE) {
		// A shim for this group already serves here: hand containerd the same address.
		if err := bundle.WriteAddress(".", address); err != nil {
			return err
		}
		return reply(f, req, address)
	}
	if err != nil {
		return err
	}
	defer ln.Close()
	shim, err := spawn(f, ln, req.shimCgroup)
	if err != nil {
		removeSocket(path)
		return err
	}
	// From here on a failure must not leave a shim serving that nobody knows of: containerd
	// sees the start fail and never sends it Shutdown.
	if err := launched(shim.Process.Pid, address); err != nil {
		_ = shim.Process.Kill()
		_ = shim.Wait()
		removeSocket(path)
		return err
	}
	_ = shim.Process.Release() // re-parented; it lives on
	return reply(f, req, address)
}

// launched records a freshly started long-lived shim: its pid, its address (which containerd
// 1.6 reads when it reconnects to running shims after a restart), and its OOM score. On failure
// it removes what it wrote: both files would name a shim that is about to be killed.
func launched(pid int, address string) (err error) {
	var written []string
	defer func() {
		if err != nil {
			for _, name := range written {
				_ = os.Remove(name)
			}
		}
	}()
	if err := bundle.WritePidFile(bundle.ShimPidFile, pid); err != nil {
		return err
	}
	written = append(written, bundle.ShimPidFile)
	if err := bundle.WriteAddress(".", address); err != nil {
		return err
	}
	written = append(written, bundle.AddressFile)
	return adjustOOMScore(pid)
}

// adjustOOMScore makes the shim the OOM killer's choice before containerd, as containerd's runc
// shim does (AdjustOOMScore in pkg/shim): one more than the score of the helper's parent, which
// is containerd, capped at the kernel's maximum.
func adjustOOMScore(pid int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", os.Getppid()))
	if err != nil {
		return fmt.Errorf("read the caller's OOM score: %w", err)
	}
	score, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("read the caller's OOM score: %w", err)
	}
	score = min(score+1, 1000)
	err = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(score)), 0)
	// Unprivileged, the shim may not lower a score it inherited; like containerd's runc shim
	// it then keeps the one it has.
	if err != nil && !(errors.Is(err, os.ErrPermission) && os.Geteuid() != 0) {
		return fmt.Errorf("set the shim's OOM score: %w", err)
	}
	return nil
}

// removeSocket removes the socket a failed start bound. Its own failure goes unreported: the
// start's error is the one line containerd shows, and a socket left behind is replaced by the
// next start, which finds nobody listening on it.
func removeSocket(path string) {
	_ = os.Remove(path)
}

// spawn re-executes the shim to serve on ln, in a process group of its own (and in shimCgroup,
// when the runtime options name one). The caller releases the process once it is recorded.
func spawn(f flags, ln *net.UnixListener, shimCgroup string) (*exec.Cmd, error) {
	file, err := ln.File()
	if err != nil {
		return nil, fmt.Errorf("socket file descriptor: %w", err)
	}
	defer file.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	args := []string{"-namespace", f.namespace, "-id", f.id, "-address", f.address}
	if f.publishBinary != "" {
		args = append(args, "-publish-binary", f.publishBinary)
	}
	if f.debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	// The long-lived shim gets the listener as fd 3 and no stdio: containerd reads the helper's
	// output to EOF, which a child holding it would delay forever.
	cmd.ExtraFiles = []*os.File{file}
	// Its own process group keeps a Ctrl-C aimed at the caller's terminal away from it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := startCoreScheduled(cmd); err != nil {
		return nil, err
	}
	if shimCgroup != "" {
		if err := cgroups.Join(shimCgroup, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, err
		}
	}
	return cmd, nil
}

// startCoreScheduled starts cmd. With SCHED_CORE set in the environment, as containerd's runc
// shim honours it, cmd first gets a core-scheduling cookie of its own (PR_SCHED_CORE_CREATE
// for this process group, inherited across the fork): the shim and the containers it starts
// then never share an SMT core with tasks of another cookie. The thread is locked so that the
// fork happens on the thread that made the cookie. A kernel without core scheduling fails the
// start, as it does the reference's.
func startCoreScheduled(cmd *exec.Cmd) error {
	if os.Getenv("SCHED_CORE") != "" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		const pidtypePgid = 2
		if err := unix.Prctl(unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_CREATE, 0, pidtypePgid, 0); err != nil {
			return fmt.Errorf("enable sched core support: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start long-lived shim: %w", err)
	}
	return nil
}

// reply prints the address in the form the caller reads.
func reply(f flags, req request, address string) error {
	form, version := replyForm(req)
	if f.debug {
		logReply(f, form, version, address)
	}
	switch form {
	case replyProtobuf:
		out, err := proto.Marshal(&bootapi.BootstrapResult{Version: int32(version), Address: address, Protocol: "ttrpc"})
		if err != nil {
			return fmt.Errorf("marshal bootstrap result: %w", err)
		}
		_, err = os.Stdout.Write(out)
		return err
	case replyAddress:
		_, err := fmt.Fprint(os.Stdout, address)
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(bundle.Bootstrap{Version: version, Address: address, Protocol: "ttrpc"})
}

// The forms of start's reply, one per bootstrap generation of containerd.
const (
	replyAddress  = "address"  // the bare address: containerd 1.6, which sets no MAX_SHIM_VERSION
	replyJSON     = "json"     // containerd 1.7 to 2.2, which set MAX_SHIM_VERSION
	replyProtobuf = "protobuf" // a BootstrapResult: containerd 2.3 and later, which send BootstrapParams
)

// replyForm is the form of start's reply and the Task API version it names, which is the one
// containerd then speaks to the shim.
func replyForm(req request) (form string, version int) {
	if req.bootstrap {
		return replyProtobuf, 3
	}
	max := os.Getenv("MAX_SHIM_VERSION")
	if max == "" {
		return replyAddress, 2
	}
	// The Task API version the caller can speak, at most ours.
	version, err := strconv.Atoi(max)
	if err != nil || version < 2 {
		version = 2
	}
	return replyJSON, min(version, 3)
}

// logReply records, with -debug, which generation containerd spoke: stdout carries the reply
// alone, so the line goes to the bundle's log FIFO, which containerd reads from before it runs
// start and copies into its own log. Without a reader there is nobody to tell, and start goes on.
func logReply(f flags, form string, version int, address string) {
	out, err := openLogFIFO(bundle.LogFIFO)
	if err != nil {
		return
	}
	defer out.Close()
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Debug("start", "namespace", f.namespace, "id", f.id, "reply", form, "task_api", version, "address", address)
}

// listen makes the socket directory and binds the socket 0600 in it. A socket file nobody
// listens on is a leftover of a dead shim and is replaced; a live one yields EADDRINUSE.
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

// makeSocketDir creates what is missing of dir, each new directory 0700, and changes nothing
// that exists: the directory may be containerd's own (socket_dir) or one an operator shares.
// dir, and every directory the shim had to create, must be a real directory of the shim's own
// uid: a directory another user made first (or a symlink to one) would let that user put a
// socket of theirs at the predictable name, which containerd would take for the shim.
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
	// The umask makes the socket 0600 from the moment it exists.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the long-lived shim owns the file
	return ln, nil
}

// openLogFIFO opens the FIFO without blocking: with no reader the open fails with ENXIO instead
// of hanging the shim. The check and the open are of one inode: the name is opened once, as an
// O_PATH handle that does not follow a symlink, the handle is checked, and the FIFO is reopened
// through it (/proc/self/fd), the way containerd/fifo opens a FIFO. A check of the name and a
// second open of the name would follow a symlink swapped in between.
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
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// testLogFIFOChecked, set by a test, runs between the check of the log FIFO and its open.
var testLogFIFOChecked func()
