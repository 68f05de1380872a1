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

	"github.com/shimwalk/shimwalk/final/driver"
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
	CtrBinary    string // the ctr of the same release: ctr 1.6 and 2.x differ in flags and output

	env    []string // added to containerd's environment
	v1Only bool     // in a mount namespace without cgroup2
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has been waited for
}

var (
	ctdMu sync.Mutex
	ctd   *Containerd // Debian's 1.6; guarded by ctdMu; stopped by Main
	ctd2  *Containerd // 2.x from scripts/containerd2.sh; guarded by ctdMu; stopped by Main
	ctdV1 *Containerd // 1.6 without cgroup2, for crun; guarded by ctdMu; stopped by Main
)

// flavour is what differs between the containerd releases the kit runs.
type flavour struct {
	dir       string // below WorkDir
	namespace string
	binary    string
	ctr       string
	env       []string
	// configVersion is the config.toml schema: 2 for containerd 1.x, 3 for 2.x (2.4 reads 4, and
	// migrates 3 in memory with a warning in its log; 3 keeps every 2.x release working).
	configVersion int
	disabled      []string // plugins that fail on this machine or that no test needs
	// cgroupV1Only runs containerd, and so its shims and their runtimes, in a mount namespace
	// of its own without the cgroup2 hierarchy. This machine mounts cgroup v1 controllers
	// beside a cgroup2 hierarchy that holds one controller, a "hybrid" layout that crun refuses.
	cgroupV1Only bool
}

// disabled16 keeps containerd 1.6 small: no CRI, no snapshotters that this machine cannot run.
var disabled16 = []string{
	"io.containerd.grpc.v1.cri",
	"io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.internal.v1.tracing",
	"io.containerd.tracing.processor.v1.otlp",
}

// disabled2 is the same for containerd 2.x, where CRI is four plugins. CRI would start here, but
// it probes CNI and runs `containerd-shim-runc-v2 -info` from PATH, and no test needs it. NRI
// listens on the host-wide /var/run/nri/nri.sock, which test processes running side by side
// would fight over. The shim sandbox controller stays: without any sandbox controller the
// sandbox-controllers gRPC service fails to load.
var disabled2 = []string{
	"io.containerd.grpc.v1.cri",
	"io.containerd.cri.v1.images",
	"io.containerd.cri.v1.runtime",
	"io.containerd.podsandbox.controller.v1.podsandbox",
	"io.containerd.nri.v1.nri",
	"io.containerd.snapshotter.v1.blockfile",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.differ.v1.erofs",
	"io.containerd.internal.v1.tracing",
	"io.containerd.tracing.processor.v1.otlp",
}

// StartContainerd returns the test process's private containerd (Debian's 1.6, from PATH),
// starting it on first use. It lives until the package's tests are done.
func StartContainerd(t testing.TB) *Containerd {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "containerd", "ctr", "runc")
	bin, _ := exec.LookPath("containerd")
	ctr, _ := exec.LookPath("ctr")
	return startContainerd(t, &ctd, flavour{
		dir: "ctd",
		// ctr puts containers in the cgroup /<namespace>/<id>, which test processes running
		// side by side would otherwise share.
		namespace:     fmt.Sprintf("shimwalk-test-%d", os.Getpid()),
		binary:        bin,
		ctr:           ctr,
		configVersion: 2,
		disabled:      disabled16,
	})
}

// StartContainerdCgroupV1 is StartContainerd in a private mount namespace where only the cgroup
// v1 hierarchies are mounted, for runtimes that refuse this machine's hybrid layout (crun). The
// host's mounts are untouched. Mounts the shims make are in that namespace: see Mounts.
func StartContainerdCgroupV1(t testing.TB) *Containerd {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "containerd", "ctr", "runc", "unshare")
	bin, _ := exec.LookPath("containerd")
	ctr, _ := exec.LookPath("ctr")
	return startContainerd(t, &ctdV1, flavour{
		dir:           "ctdv1",
		namespace:     fmt.Sprintf("shimwalk-testv1-%d", os.Getpid()),
		binary:        bin,
		ctr:           ctr,
		configVersion: 2,
		disabled:      disabled16,
		cgroupV1Only:  true,
	})
}

// StartContainerd2 is StartContainerd for containerd 2.x, built by scripts/containerd2.sh. It
// runs beside the 1.6 one, in its own directory and namespace.
func StartContainerd2(t testing.TB) *Containerd {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "runc")
	bin := requireContainerd2(t)
	return startContainerd(t, &ctd2, flavour{
		dir: "ctd2",
		// Apart from the 1.6 one's too: the shims of both keep runc state below RuncRoot/<namespace>.
		namespace: fmt.Sprintf("shimwalk-test2-%d", os.Getpid()),
		binary:    filepath.Join(bin, "containerd"),
		ctr:       filepath.Join(bin, "ctr"),
		// containerd looks a runtime name up in PATH before beside its own binary: without this,
		// io.containerd.runc.v2 would be Debian's 1.6 shim.
		env:           []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")},
		configVersion: 3,
		disabled:      disabled2,
	})
}

// requireContainerd2 returns the directory holding the containerd 2.x binaries, or fails or skips
// the test as RequireCommand does.
func requireContainerd2(t testing.TB) string {
	t.Helper()
	version, bin := containerd2Dir(t)
	for _, name := range []string{"containerd", "ctr"} {
		if fi, err := os.Stat(filepath.Join(bin, name)); err != nil || fi.Mode()&0o111 == 0 {
			missing(t, fmt.Sprintf("containerd %s is not built in %s (scripts/containerd2.sh builds it)", version, bin))
		}
	}
	return bin
}

// containerd2Dir is where scripts/containerd2.sh puts the binaries of the containerd version it
// names. The version is read from the script so that bumping it there is the only edit.
func containerd2Dir(t testing.TB) (version, bin string) {
	t.Helper()
	script := filepath.Join(RepoRoot(t), "scripts", "containerd2.sh")
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CONTAINERD2_VERSION="); ok {
			version = strings.TrimSpace(v)
			break
		}
	}
	if version == "" {
		t.Fatalf("%s sets no CONTAINERD2_VERSION", script)
	}
	cache := os.Getenv("SHIMWALK_CACHE")
	if cache == "" {
		cache = "/var/cache/shimwalk"
	}
	return version, filepath.Join(cache, "containerd-"+version, "bin")
}

// startContainerd starts the containerd f describes into *slot, unless one is there already.
func startContainerd(t testing.TB, slot **Containerd, f flavour) *Containerd {
	t.Helper()
	ctdMu.Lock()
	defer ctdMu.Unlock()
	if *slot != nil {
		return *slot
	}
	dir := filepath.Join(WorkDir(t), f.dir)
	c := &Containerd{
		Dir:          dir,
		Address:      filepath.Join(dir, "c.sock"),
		TTRPCAddress: filepath.Join(dir, "c.sock.ttrpc"),
		SocketDir:    filepath.Join(dir, "s"),
		RuncRoot:     RuncRoot(t),
		Namespace:    f.namespace,
		Binary:       f.binary,
		CtrBinary:    f.ctr,
		env:          f.env,
		v1Only:       f.cgroupV1Only,
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(c.config(f)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	*slot = c
	return c
}

// config puts everything containerd writes under Dir. The keys used here mean the same in
// config versions 2 and 3.
func (c *Containerd) config(f flavour) string {
	var disabled strings.Builder
	for _, p := range f.disabled {
		fmt.Fprintf(&disabled, "  %q,\n", p)
	}
	s := fmt.Sprintf(`version = %d
root = %q
state = %q
disabled_plugins = [
%s]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  level = "debug"

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, f.configVersion, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), disabled.String(),
		c.Address, c.TTRPCAddress, filepath.Join(c.Dir, "opt"))
	if f.configVersion >= 3 {
		// containerd 2.3 and later hand shims a socket directory of their own (socket_dir in
		// BootstrapParams, default /run/containerd/s), which wins over SHIMWALK_SOCKET_DIR.
		s += fmt.Sprintf("\n[plugins.\"io.containerd.shim.v1.manager\"]\n  socket_dir = %q\n", c.SocketDir)
	}
	return s
}

func (c *Containerd) start() error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.Binary, "--config", filepath.Join(c.Dir, "config.toml"))
	if c.v1Only {
		// unshare and then sh exec, so containerd keeps the pid the kit waits on.
		script := `umount /sys/fs/cgroup/unified 2>/dev/null; exec "$@"`
		cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--",
			"sh", "-c", script, "sh", c.Binary, "--config", filepath.Join(c.Dir, "config.toml"))
	}
	cmd.Env = append(os.Environ(), "SHIMWALK_SOCKET_DIR="+c.SocketDir, "SHIMWALK_RUNC_ROOT="+c.RuncRoot)
	cmd.Env = append(cmd.Env, c.env...)
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
		err := exec.CommandContext(ctx, c.CtrBinary, "--address", c.Address, "version").Run()
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
	for _, c := range []**Containerd{&ctd, &ctd2, &ctdV1} {
		if *c != nil {
			(*c).stop()
			*c = nil
		}
	}
}

func (c *Containerd) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
	// containerd leaves shims running by design; whatever a test left is killed here, and each
	// test asserts on its own shims before it ends.
	for _, pid := range shimsOf(c.Address) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Main removes the cgroups of the 1.6 namespace only; this covers every instance's.
	removeCgroups(c.Namespace)
}

// Ctr runs this containerd's ctr against it in its test namespace.
func (c *Containerd) Ctr(t testing.TB, args ...string) Result {
	t.Helper()
	full := append([]string{"--address", c.Address, "--namespace", c.Namespace}, args...)
	return Run(t, "", nil, c.CtrBinary, full...)
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

// Mounts lists the mount points at or below dir as containerd (and its shims) see them, which
// for StartContainerdCgroupV1 is another mount namespace than the test's.
func (c *Containerd) Mounts(t testing.TB, dir string) []string {
	t.Helper()
	m, err := driver.MountsUnderIn(fmt.Sprintf("/proc/%d/mountinfo", c.cmd.Process.Pid), dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
