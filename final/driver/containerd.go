// SPDX-License-Identifier: Apache-2.0

// A private containerd of any release: the real one, for the end-to-end tests, the benchmark and
// the pod lab, kept apart from the system's, and the ctr command line that reaches it. Not a
// mirror of any containerd function: it writes the config containerd reads.

package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ContainerdConfig is what differs between the private containerds of one kind or another.
type ContainerdConfig struct {
	Dir       string // root, state, sockets and the shims' socket directory all live below it
	Namespace string // the namespace ctr is pointed at
	Binary    string // the containerd executable
	Ctr       string // the ctr of the same release: ctr 1.6 and 2.x differ in flags and output
	RuncRoot  string // SHIMWALK_RUNC_ROOT of the shims it starts
	Env       []string
	// ConfigVersion is the config.toml schema: 2 for containerd 1.x, 3 for 2.x (2.4 reads 4, and
	// migrates 3 in memory with a warning in its log; 3 keeps every 2.x release working).
	ConfigVersion int
	Disabled      []string // plugins that fail on this machine or that nothing here needs
	// CgroupV1Only runs containerd, and so its shims and their runtimes, in a mount namespace
	// of its own without the cgroup2 hierarchy. This machine mounts cgroup v1 controllers
	// beside a cgroup2 hierarchy that holds one controller, a "hybrid" layout that crun refuses.
	CgroupV1Only bool
	// LogLevel is containerd's; "debug", the default, also makes containerd start shims with
	// -debug. A measurement wants "info", as in production.
	LogLevel string
	// Extra is TOML appended to the config, for plugin sections such as CRI's (tools/labpod).
	Extra string
	// SharedNamespace says that the namespace's cgroups are not this containerd's alone: "k8s.io"
	// on a Kubernetes node holds the node's pods. Stop then removes only the namespace's cgroups
	// that were not there when StartContainerd began, instead of every empty one.
	SharedNamespace bool
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

// disabled17 is disabled16 for containerd 1.7, which adds NRI: it listens on the host-wide
// /var/run/nri/nri.sock, which private containerds running side by side would fight over.
var disabled17 = append(slices.Clone(disabled16), "io.containerd.nri.v1.nri")

// disabled2 is the same for containerd 2.x, where CRI is four plugins. CRI would start here, but
// it probes CNI and runs `containerd-shim-runc-v2 -info` from PATH, and nothing here needs it. NRI
// listens on the host-wide /var/run/nri/nri.sock, which private containerds running side by side
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

// MissingError says that a containerd release is not installed where ReleaseConfig looks, and
// what installs it: a test skips (or fails under CI) on it, a tool reports it.
type MissingError struct{ msg string }

func (e *MissingError) Error() string { return e.msg }

// ReleaseConfig is what a containerd release decides of its ContainerdConfig: its binaries, the
// environment they need, the config schema it reads, and the plugins it runs without. version ""
// is Debian's 1.6 from PATH, any other one a release that scripts/containerd2.sh built. The
// caller adds the rest (Dir, Namespace, RuncRoot, ...). A release that is not installed is a
// *MissingError.
func ReleaseConfig(version string) (ContainerdConfig, error) {
	if version == "" {
		cfg := ContainerdConfig{ConfigVersion: 2, Disabled: disabled16}
		var err error
		if cfg.Binary, err = exec.LookPath("containerd"); err != nil {
			return cfg, &MissingError{"containerd is not installed (scripts/deps.sh installs it)"}
		}
		if cfg.Ctr, err = exec.LookPath("ctr"); err != nil {
			return cfg, &MissingError{"ctr is not installed (scripts/deps.sh installs it)"}
		}
		return cfg, nil
	}
	bin := containerdDir(version)
	cfg := ContainerdConfig{
		Binary: filepath.Join(bin, "containerd"),
		Ctr:    filepath.Join(bin, "ctr"),
		// containerd looks a runtime name up in PATH before beside its own binary: without this,
		// io.containerd.runc.v2 would be Debian's 1.6 shim.
		Env:           []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")},
		ConfigVersion: 3,
		Disabled:      disabled2,
	}
	if strings.HasPrefix(version, "v1.") {
		// containerd 1.7 reads config version 2 and has CRI as one plugin, as 1.6 does.
		cfg.ConfigVersion, cfg.Disabled = 2, disabled17
	}
	for _, p := range []string{cfg.Binary, cfg.Ctr} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return cfg, &MissingError{fmt.Sprintf("containerd %s is not built in %s (scripts/containerd2.sh %s builds it)", version, bin, version)}
		}
	}
	return cfg, nil
}

// Containerd2Version is the containerd 2.x release (CONTAINERD2_VERSION of scripts/containerd2.sh,
// below repoRoot) the tests and the benchmark run against. It is read from the script so that
// bumping it there is the only edit.
func Containerd2Version(repoRoot string) (string, error) {
	values, err := scriptVar(repoRoot, "CONTAINERD2_VERSION")
	if err != nil {
		return "", err
	}
	if len(values) != 1 {
		return "", fmt.Errorf("scripts/containerd2.sh: CONTAINERD2_VERSION names %d versions, want one", len(values))
	}
	return values[0], nil
}

// ContainerdVersions lists the containerd releases scripts/containerd2.sh builds by default
// (CONTAINERD_VERSIONS): the generations the end-to-end matrix runs beside Debian's 1.6.
func ContainerdVersions(repoRoot string) ([]string, error) {
	return scriptVar(repoRoot, "CONTAINERD_VERSIONS")
}

// containerdDir is the directory scripts/containerd2.sh builds version's binaries into.
func containerdDir(version string) string {
	cache := os.Getenv("SHIMWALK_CACHE")
	if cache == "" {
		cache = "/var/cache/shimwalk"
	}
	return filepath.Join(cache, "containerd-"+version, "bin")
}

// scriptVar reads the shell variable name from scripts/containerd2.sh: a word (NAME=v2.4.2) or
// an array of words (NAME=(v1.7.35 v2.4.2)), each a containerd version.
func scriptVar(repoRoot, name string) ([]string, error) {
	script := filepath.Join(repoRoot, "scripts", "containerd2.sh")
	data, err := os.ReadFile(script)
	if err != nil {
		return nil, fmt.Errorf("containerd versions: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(line, name+"=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if inner, ok := strings.CutPrefix(v, "("); ok {
			v, ok = strings.CutSuffix(inner, ")")
			if !ok {
				return nil, fmt.Errorf("%s: %s: the array does not close on its line", script, name)
			}
		}
		versions := strings.Fields(v)
		for _, version := range versions {
			if !validVersion.MatchString(version) {
				return nil, fmt.Errorf("%s: %s: %q is no containerd version", script, name, version)
			}
		}
		if len(versions) == 0 {
			break
		}
		return versions, nil
	}
	return nil, fmt.Errorf("%s sets no %s", script, name)
}

// validVersion is a containerd release tag; it also becomes a directory name.
var validVersion = regexp.MustCompile(`^v[12]\.\d+\.\d+(-[0-9A-Za-z.]+)?$`)

// Containerd is a running private containerd.
type Containerd struct {
	Dir          string
	Address      string // gRPC socket, for ctr
	ttrpcAddress string
	SocketDir    string // SHIMWALK_SOCKET_DIR of the shims it starts
	RuncRoot     string // SHIMWALK_RUNC_ROOT of the shims it starts
	Namespace    string

	cfg ContainerdConfig
	// cgroupsBefore are the namespace's cgroups that existed at StartContainerd, for a
	// SharedNamespace: Stop leaves them.
	cgroupsBefore map[string]bool
	cmd           *exec.Cmd
	done          chan struct{} // closed when cmd has been waited for
}

// StartContainerd writes cfg's config.toml and starts containerd on it, returning once it
// answers ctr. Stop ends it.
func StartContainerd(cfg ContainerdConfig) (*Containerd, error) {
	c := &Containerd{
		Dir:          cfg.Dir,
		Address:      filepath.Join(cfg.Dir, "c.sock"),
		ttrpcAddress: filepath.Join(cfg.Dir, "c.sock.ttrpc"),
		SocketDir:    filepath.Join(cfg.Dir, "s"),
		RuncRoot:     cfg.RuncRoot,
		Namespace:    cfg.Namespace,
		cfg:          cfg,
	}
	if cfg.SharedNamespace {
		c.cgroupsBefore = cgroupDirs(cfg.Namespace)
	}
	if err := os.MkdirAll(cfg.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("containerd dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, "config.toml"), []byte(c.config()), 0o600); err != nil {
		return nil, fmt.Errorf("containerd config: %w", err)
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// config puts everything containerd writes under Dir. The keys used here mean the same in
// config versions 2 and 3.
func (c *Containerd) config() string {
	level := c.cfg.LogLevel
	if level == "" {
		level = "debug"
	}
	var disabled strings.Builder
	for _, p := range c.cfg.Disabled {
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
  level = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, c.cfg.ConfigVersion, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), disabled.String(),
		c.Address, c.ttrpcAddress, level, filepath.Join(c.Dir, "opt"))
	if c.cfg.ConfigVersion >= 3 {
		// containerd 2.3 and later hand shims a socket directory of their own (socket_dir in
		// BootstrapParams, default /run/containerd/s), which wins over SHIMWALK_SOCKET_DIR.
		s += fmt.Sprintf("\n[plugins.\"io.containerd.shim.v1.manager\"]\n  socket_dir = %q\n", c.SocketDir)
	}
	if c.cfg.Extra != "" {
		s += "\n" + c.cfg.Extra
	}
	return s
}

// Start starts containerd on the config StartContainerd wrote: the first time, or again after
// Kill.
func (c *Containerd) Start() error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("containerd log: %w", err)
	}
	defer logf.Close()
	config := filepath.Join(c.Dir, "config.toml")
	cmd := exec.Command(c.cfg.Binary, "--config", config)
	if c.cfg.CgroupV1Only {
		// unshare and then sh exec, so containerd keeps the pid that is waited on.
		script := `umount /sys/fs/cgroup/unified 2>/dev/null; exec "$@"`
		cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--",
			"sh", "-c", script, "sh", c.cfg.Binary, "--config", config)
	}
	cmd.Env = append(os.Environ(), "SHIMWALK_SOCKET_DIR="+c.SocketDir, "SHIMWALK_RUNC_ROOT="+c.RuncRoot)
	cmd.Env = append(cmd.Env, c.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// containerd and the shims it starts must not get the caller's terminal signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func() {
		// Owned by c: Kill and Stop wait on done.
		_ = cmd.Wait()
		close(c.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.CtrCommand(ctx, "version").Run()
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
			c.Kill()
			return fmt.Errorf("containerd did not answer within 30s; see %s", logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pid is containerd's process id (while it runs).
func (c *Containerd) pid() int { return c.cmd.Process.Pid }

// Kill stops containerd with SIGKILL, as a crash would; the shims it started live on.
func (c *Containerd) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Stop ends containerd, kills every shim it left running (containerd leaves shims running by
// design), and removes the cgroups of its namespace, which must be empty by then: for a
// SharedNamespace, only those it made.
func (c *Containerd) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
	for _, pid := range ShimsOf(c.Address) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if c.cfg.SharedNamespace {
		removeCgroupsExcept(c.cgroupsBefore, c.Namespace)
		return
	}
	RemoveCgroups(c.Namespace)
}

// CtrCommand is this containerd's ctr, in its namespace, with args: the one way to build a ctr
// command line against it. A command that lives as long as its caller lets it takes
// context.Background().
func (c *Containerd) CtrCommand(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--address", c.Address, "--namespace", c.Namespace}, args...)
	return exec.CommandContext(ctx, c.cfg.Ctr, full...)
}

// Bundle is where containerd keeps the bundle of task id.
func (c *Containerd) Bundle(id string) string {
	return filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", c.Namespace, id)
}

// Shims lists the long-lived shim processes this containerd started for id ("" for any).
func (c *Containerd) Shims(id string) []int {
	var pids []int
	for _, pid := range ShimsOf(c.Address) {
		if id == "" || FlagValue(Cmdline(pid), "id") == id {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Mounts lists the mount points at or below dir as containerd (and its shims) see them, which
// for a CgroupV1Only one is another mount namespace than the caller's.
func (c *Containerd) Mounts(dir string) ([]string, error) {
	return MountsUnderIn(fmt.Sprintf("/proc/%d/mountinfo", c.pid()), dir)
}

// ShimsOf finds processes started with -address address that are not a start or delete helper.
func ShimsOf(address string) []int {
	return ProcessesWhere(func(args []string) bool {
		last := args[len(args)-1]
		return len(args) > 1 && FlagValue(args, "address") == address && last != "start" && last != "delete"
	})
}

// RemoveCgroups removes the (by now empty) cgroup directories at paths below each hierarchy's
// root, deepest first. A cgroup that still holds a process stays.
func RemoveCgroups(paths ...string) { removeCgroupsExcept(nil, paths...) }

// CgroupRoots are the hierarchies' roots: each v1 controller's and the v2 (or hybrid) one (on a
// v1 or hybrid host /sys/fs/cgroup itself is a tmpfs that holds them).
func CgroupRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	return append(roots, "/sys/fs/cgroup")
}

// cgroupTree is the directories at and below path in every hierarchy, parents first.
func cgroupTree(path string) []string {
	var dirs []string
	for _, root := range CgroupRoots() {
		_ = filepath.WalkDir(filepath.Join(root, path), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	return dirs
}

// cgroupDirs are the cgroup directories at and below paths in every hierarchy now.
func cgroupDirs(paths ...string) map[string]bool {
	set := map[string]bool{}
	for _, p := range paths {
		for _, d := range cgroupTree(p) {
			set[d] = true
		}
	}
	return set
}

// removeCgroupsExcept is RemoveCgroups for the directories not in keep (none for nil).
func removeCgroupsExcept(keep map[string]bool, paths ...string) {
	for _, p := range paths {
		dirs := cgroupTree(p)
		for i := len(dirs) - 1; i >= 0; i-- {
			if !keep[dirs[i]] {
				_ = os.Remove(dirs[i]) // fails, as it should, while a process is inside
			}
		}
	}
}
