// SPDX-License-Identifier: Apache-2.0

// The test process's private containerds: one per release and cgroup layout, started on first
// use through driver.StartContainerd, or one a test owns alone (NewContainerd). Not a mirror of
// any containerd function.

package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// ctds are the running containerds by their directory: Debian's 1.6 ("ctd"), the same
	// without cgroup2 for crun ("ctdv1"), the 2.x of scripts/containerd2.sh ("ctd2"), and the
	// releases of its matrix ("ctd-<version>", "ctdv1-<version>"). Guarded by ctdMu; stopped by
	// Main.
	ctds = map[string]*Containerd{}
)

// StartContainerd returns the test process's private containerd (Debian's 1.6, from PATH),
// starting it on first use. It lives until the package's tests are done.
func StartContainerd(t testing.TB) *Containerd {
	t.Helper()
	return StartContainerdRelease(t, "", false)
}

// StartContainerdCgroupV1 is StartContainerd in a private mount namespace where only the cgroup
// v1 hierarchies are mounted, for runtimes that refuse this machine's hybrid layout (crun). The
// host's mounts are untouched. Mounts the shims make are in that namespace: see Mounts.
func StartContainerdCgroupV1(t testing.TB) *Containerd {
	t.Helper()
	return StartContainerdRelease(t, "", true)
}

// StartContainerd2 is StartContainerd for containerd 2.x, built by scripts/containerd2.sh. It
// runs beside the 1.6 one, in its own directory and namespace.
func StartContainerd2(t testing.TB) *Containerd {
	t.Helper()
	return StartContainerdRelease(t, containerd2Version(t), false)
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
// Debian's, any other version one that scripts/containerd2.sh built. cgroupV1Only runs it without
// the cgroup2 hierarchy, for crun. Each release and layout has a directory and a namespace of its
// own: the shims keep runc state below RuncRoot/<namespace>, and ctr puts containers in the
// cgroup /<namespace>/<id>, which test processes running side by side would otherwise share.
func StartContainerdRelease(t testing.TB, version string, cgroupV1Only bool) *Containerd {
	t.Helper()
	dir, namespace := "ctd", "shimwalk-test"
	if cgroupV1Only {
		dir, namespace = dir+"v1", namespace+"v1"
	}
	if version != "" {
		if version == containerd2Version(t) && !cgroupV1Only {
			dir, namespace = dir+"2", namespace+"2"
		} else {
			dir, namespace = dir+"-"+version, namespace+"-"+version
		}
	}
	namespace = fmt.Sprintf("%s-%d", namespace, os.Getpid())

	ctdMu.Lock()
	defer ctdMu.Unlock()
	if c := ctds[dir]; c != nil {
		return c
	}
	ctds[dir] = launch(t, version, cgroupV1Only, dir, namespace)
	return ctds[dir]
}

// NewContainerd starts a containerd that belongs to t alone, so that t may kill and restart it
// while other tests run: generation 1 is Debian's 1.6, 2 is the 2.x of scripts/containerd2.sh.
// name keeps its directory and namespace apart from every other one of the test process. When t
// ends it is stopped, and the shims it left are killed.
func NewContainerd(t testing.TB, generation int, name string) *Containerd {
	t.Helper()
	var version string
	switch generation {
	case 1:
	case 2:
		version = containerd2Version(t)
	default:
		t.Fatalf("no containerd generation %d", generation)
	}
	// ctr puts containers in the cgroup /<namespace>/<id>, and the shims keep runc state below
	// RuncRoot/<namespace>: both are this containerd's alone.
	c := launch(t, version, false, name, fmt.Sprintf("shimwalk-%s-%d", name, os.Getpid()))
	t.Cleanup(c.Stop)
	return c
}

// containerd2Version is the containerd 2.x that scripts/containerd2.sh names.
func containerd2Version(t testing.TB) string {
	t.Helper()
	version, err := driver.Containerd2Version(RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return version
}

// launch starts a containerd of release version in dir below WorkDir, or fails or skips the test
// as RequireCommand does when that release is not installed; the caller stops it.
func launch(t testing.TB, version string, cgroupV1Only bool, dir, namespace string) *Containerd {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "runc")
	if cgroupV1Only {
		RequireCommand(t, "unshare")
	}
	cfg, err := driver.ReleaseConfig(version)
	var notInstalled *driver.MissingError
	if errors.As(err, &notInstalled) {
		Missing(t, err.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = filepath.Join(WorkDir(t), dir)
	cfg.Namespace = namespace
	cfg.RuncRoot = RuncRoot(t)
	cfg.CgroupV1Only = cgroupV1Only
	c, err := driver.StartContainerd(cfg)
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

// stopContainerd ends the test process's containerds and kills whatever shim a test left: each
// test asserts on its own shims before it ends.
func stopContainerd() {
	ctdMu.Lock()
	defer ctdMu.Unlock()
	for dir, c := range ctds {
		c.Stop()
		delete(ctds, dir)
	}
}

// Ctr runs this containerd's ctr against it in its test namespace.
func (c *Containerd) Ctr(t testing.TB, args ...string) Result {
	t.Helper()
	return run(t, c.CtrCommand(context.Background(), args...))
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
