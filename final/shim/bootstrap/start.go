// SPDX-License-Identifier: Apache-2.0

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
	"strconv"
	"syscall"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
	"github.com/shimwalk/shimwalk/final/internal/identifiers"
	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/process"
)

// DefaultSocketDir is where sockets go when neither containerd (socket_dir) nor the
// environment (SHIMWALK_SOCKET_DIR) says otherwise.
const DefaultSocketDir = "/run/shimwalk/s"

// groupLabels are the spec annotations that put containers into one shim, first match wins.
var groupLabels = []string{"io.containerd.shimwalk.v2.group", "io.kubernetes.cri.sandbox-id"}

// request is what start learned from its caller.
type request struct {
	bootstrap  bool // containerd 2.3+: BootstrapParams in, BootstrapResult out
	socketDir  string
	shimCgroup string // the ShimCgroup runtime option: where the long-lived shim goes
}

// readRequest reads start's stdin: BootstrapParams from containerd 2.3 and later, the runtime
// options as an Any (or nothing) from earlier ones. Both begin with a string in field 1, so
// BootstrapParams is recognised by carrying this very instance id and namespace.
func readRequest(f flags, in []byte) (request, error) {
	r := request{socketDir: os.Getenv("SHIMWALK_SOCKET_DIR")}
	var (
		params bootapi.BootstrapParams
		err    error
	)
	if len(in) > 0 && proto.Unmarshal(in, &params) == nil && params.GetInstanceID() == f.id && params.GetNamespace() == f.namespace {
		r.bootstrap = true
		if d := params.GetSocketDir(); d != "" {
			r.socketDir = d
		}
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
		r.socketDir = DefaultSocketDir
	}
	if !filepath.IsAbs(r.socketDir) {
		return r, fmt.Errorf("socket directory %q is not absolute", r.socketDir)
	}
	return r, nil
}

// group is the id that names the shim: the container's own, or the group annotation of its
// spec, so that a pod's containers share one shim.
func group(f flags) (string, error) {
	if _, err := os.Lstat("config.json"); errors.Is(err, os.ErrNotExist) {
		return f.id, nil // no spec yet: the shim is this container's alone
	}
	// Bounded: the spec is read whole, and this runs before anything else has checked it.
	annotations, err := process.ReadAnnotations("config.json")
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

// socketPath hashes namespace and group into a name short enough for the 108-byte limit.
func socketPath(dir, namespace, group string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + group))
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
	path := socketPath(req.socketDir, f.namespace, g)
	address := "unix://" + path
	ln, err := listen(path)
	if errors.Is(err, unix.EADDRINUSE) {
		// A shim for this group already serves here: hand containerd the same address.
		if err := fsutil.WriteFileAtomic("address", []byte(address), 0o600); err != nil {
			return err
		}
		return reply(f, req, address)
	}
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := spawn(f, ln, path, req.shimCgroup); err != nil {
		os.Remove(path)
		return err
	}
	// containerd 1.6 reads this file when it reconnects to running shims after a restart.
	if err := fsutil.WriteFileAtomic("address", []byte(address), 0o600); err != nil {
		return err
	}
	return reply(f, req, address)
}

// spawn re-executes the shim to serve on ln, in a process group of its own (and in shimCgroup,
// when the runtime options name one), and records its pid.
func spawn(f flags, ln *net.UnixListener, path, shimCgroup string) error {
	file, err := ln.File()
	if err != nil {
		return fmt.Errorf("socket file descriptor: %w", err)
	}
	defer file.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
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
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start long-lived shim: %w", err)
	}
	pid := cmd.Process.Pid
	if shimCgroup != "" {
		if err := cgroups.Join(shimCgroup, pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return err
		}
	}
	_ = cmd.Process.Release() // re-parented; it lives on
	return fsutil.WriteFileAtomic("shim.pid", []byte(strconv.Itoa(pid)), 0o600)
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
	return json.NewEncoder(os.Stdout).Encode(struct {
		Version  int    `json:"version"`
		Address  string `json:"address"`
		Protocol string `json:"protocol"`
	}{version, address, "ttrpc"})
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
	out, err := openLogFIFO("log")
	if err != nil {
		return
	}
	defer out.Close()
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Debug("start", "namespace", f.namespace, "id", f.id, "reply", form, "task_api", version, "address", address)
}

// listen creates the socket directory 0700 and the socket 0600. A socket file nobody listens
// on is a leftover of a dead shim and is replaced; a live one yields EADDRINUSE.
func listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if err := os.Chmod(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("restrict socket directory: %w", err)
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
// of hanging the shim.
func openLogFIFO(name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("%s is not a FIFO", name)
	}
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}
