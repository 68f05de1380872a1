// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver"
)

// Containerd is a private containerd for one test process: its root, state, sockets and the
// shims' socket directory all live under Dir, so it never meets the system's containerd.
type Containerd struct {
	*driver.Containerd
}

var (
	ctdMu sync.Mutex
	// ctds are the running containerds by their flavour's dir: Debian's 1.6 ("ctd"), the same
	// without cgroup2 for crun ("ctdv1"), the 2.x of scripts/containerd2.sh ("ctd2"), and the
	// releases of its matrix ("ctd-<version>", "ctdv1-<version>"). Guarded by ctdMu; stopped by
	// Main.
	ctds = map[string]*Containerd{}
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

// The plugins each generation runs without: see driver.Disabled16 and driver.Disabled2.
var (
	disabled16 = driver.Disabled16
	disabled2  = driver.Disabled2
)

// StartContainerd returns the test process's private containerd (Debian's 1.6, from PATH),
// starting it on first use. It lives until the package's tests are done.
func StartContainerd(t testing.TB) *Containerd {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "containerd", "ctr", "runc")
	bin, _ := exec.LookPath("containerd")
	ctr, _ := exec.LookPath("ctr")
	return startContainerd(t, flavour{
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
	return startContainerd(t, flavour{
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
	return startContainerd(t, flavour{
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

// ContainerdVersions lists the containerd releases of scripts/containerd2.sh's matrix
// (CONTAINERD_VERSIONS), which StartContainerdRelease runs.
func ContainerdVersions(t testing.TB) []string {
	t.Helper()
	versions, err := driver.ContainerdVersions(RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

// StartContainerdRelease returns the test process's private containerd of one release: "" is
// Debian's (StartContainerd, or StartContainerdCgroupV1 with cgroupV1Only), any other version one
// that scripts/containerd2.sh built. The one of CONTAINERD2_VERSION is StartContainerd2's.
// cgroupV1Only runs it without the cgroup2 hierarchy, as StartContainerdCgroupV1 does.
func StartContainerdRelease(t testing.TB, version string, cgroupV1Only bool) *Containerd {
	t.Helper()
	if version == "" {
		if cgroupV1Only {
			return StartContainerdCgroupV1(t)
		}
		return StartContainerd(t)
	}
	if v2, _ := containerd2Dir(t); version == v2 && !cgroupV1Only {
		return StartContainerd2(t)
	}
	RequireRoot(t)
	RequireCommand(t, "runc")
	if cgroupV1Only {
		RequireCommand(t, "unshare")
	}
	bin := requireBuilt(t, version, driver.ContainerdDir(version))
	f := flavour{
		dir: "ctd-" + version,
		// Each its own namespace: the shims keep runc state below RuncRoot/<namespace>, and
		// ctr puts containers in the cgroup /<namespace>/<id>.
		namespace: fmt.Sprintf("shimwalk-test-%s-%d", version, os.Getpid()),
		binary:    filepath.Join(bin, "containerd"),
		ctr:       filepath.Join(bin, "ctr"),
		// containerd looks a runtime name up in PATH before beside its own binary: without this,
		// io.containerd.runc.v2 would be Debian's 1.6 shim.
		env:           driver.Containerd2Env(bin),
		configVersion: 3,
		disabled:      disabled2,
		cgroupV1Only:  cgroupV1Only,
	}
	if strings.HasPrefix(version, "v1.") {
		// containerd 1.7 reads config version 2 and has CRI as one plugin, as 1.6 does.
		f.configVersion, f.disabled = 2, driver.Disabled17
	}
	if cgroupV1Only {
		f.dir = "ctdv1-" + version
		f.namespace = fmt.Sprintf("shimwalk-testv1-%s-%d", version, os.Getpid())
	}
	return startContainerd(t, f)
}

// requireContainerd2 returns the directory holding the containerd 2.x binaries, or fails or skips
// the test as RequireCommand does.
func requireContainerd2(t testing.TB) string {
	t.Helper()
	version, bin := containerd2Dir(t)
	return requireBuilt(t, version, bin)
}

// requireBuilt returns bin, which holds the containerd and ctr of version, or fails or skips the
// test as RequireCommand does when they are not built there.
func requireBuilt(t testing.TB, version, bin string) string {
	t.Helper()
	for _, name := range []string{"containerd", "ctr"} {
		if fi, err := os.Stat(filepath.Join(bin, name)); err != nil || fi.Mode()&0o111 == 0 {
			missing(t, fmt.Sprintf("containerd %s is not built in %s (scripts/containerd2.sh %s builds it)", version, bin, version))
		}
	}
	return bin
}

// containerd2Dir is where scripts/containerd2.sh puts the binaries of the containerd version it
// names.
func containerd2Dir(t testing.TB) (version, bin string) {
	t.Helper()
	version, bin, err := driver.Containerd2Dir(RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return version, bin
}

// startContainerd starts the containerd f describes, unless one runs for f.dir already.
func startContainerd(t testing.TB, f flavour) *Containerd {
	t.Helper()
	ctdMu.Lock()
	defer ctdMu.Unlock()
	if c := ctds[f.dir]; c != nil {
		return c
	}
	ctds[f.dir] = launch(t, f)
	return ctds[f.dir]
}

// launch starts the containerd f describes; the caller stops it.
func launch(t testing.TB, f flavour) *Containerd {
	t.Helper()
	c, err := driver.StartContainerd(driver.ContainerdConfig{
		Dir:           filepath.Join(WorkDir(t), f.dir),
		Namespace:     f.namespace,
		Binary:        f.binary,
		Ctr:           f.ctr,
		RuncRoot:      RuncRoot(t),
		Env:           f.env,
		ConfigVersion: f.configVersion,
		Disabled:      f.disabled,
		CgroupV1Only:  f.cgroupV1Only,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Containerd{c}
}

// Kill stops containerd with SIGKILL, as a crash would; the shims it started live on.
func (c *Containerd) Kill(t testing.TB) {
	t.Helper()
	c.Containerd.Kill()
}

// Restart starts containerd again on the same configuration after Kill.
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
}

func stopContainerd() {
	ctdMu.Lock()
	defer ctdMu.Unlock()
	for dir, c := range ctds {
		c.stop()
		delete(ctds, dir)
	}
}

// stop ends containerd and kills whatever shim a test left: each test asserts on its own shims
// before it ends.
func (c *Containerd) stop() { c.Stop() }

// Ctr runs this containerd's ctr against it in its test namespace.
func (c *Containerd) Ctr(t testing.TB, args ...string) Result {
	t.Helper()
	full := append([]string{"--address", c.Address, "--namespace", c.Namespace}, args...)
	return Run(t, "", nil, c.CtrBinary, full...)
}

// Mounts lists the mount points at or below dir as containerd (and its shims) see them, which
// for StartContainerdCgroupV1 is another mount namespace than the test's.
func (c *Containerd) Mounts(t testing.TB, dir string) []string {
	t.Helper()
	m, err := c.Containerd.Mounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
