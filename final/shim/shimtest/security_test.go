// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// unixSocketPaths are the paths of the unix sockets the kernel knows (/proc/net/unix); an
// abstract socket's starts with '@'.
func unixSocketPaths(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 8 {
			paths = append(paths, fields[7])
		}
	}
	return paths
}

// TestSocketIsPrivate: the shim's socket is a file in the file system (never in the abstract
// namespace, which has no permissions at all), 0600 and root's, in a directory the shim made
// 0700. (A directory that exists is left as it is: TestSocketDirectory.)
func TestSocketIsPrivate(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	b, _ := c.started(c.run(nil, []string{"MAX_SHIM_VERSION=2"}, c.args("private", "start")...))
	path := b.SocketPath()
	if !filepath.IsAbs(path) || filepath.Dir(path) != c.sockets {
		t.Fatalf("address %s is not a path in %s", b.Address, c.sockets)
	}
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 || sys.Uid != 0 {
		t.Errorf("socket %s: mode %v, uid %d; want a socket, 0600, root's", path, st.Mode(), sys.Uid)
	}
	dir, err := os.Lstat(c.sockets)
	if err != nil {
		t.Fatal(err)
	}
	if !dir.IsDir() || dir.Mode().Perm() != 0o700 {
		t.Errorf("socket directory %s: mode %v, want a 0700 directory", c.sockets, dir.Mode())
	}
	var found bool
	for _, p := range unixSocketPaths(t) {
		if p == path {
			found = true
		}
		if strings.HasPrefix(p, "@") && strings.Contains(p, filepath.Base(path)) {
			t.Errorf("an abstract socket %s carries the shim's name", p)
		}
	}
	if !found {
		t.Errorf("the kernel lists no unix socket bound to %s", path)
	}
}

// TestOtherUserIsRefused: with the file modes opened up, the peer-credential check alone still
// keeps a client of another uid out, and the shim goes on serving its own user.
func TestOtherUserIsRefused(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	b, pid := c.started(c.run(nil, nil, c.args("creds", "start")...))
	for _, p := range []string{c.dir, c.sockets} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(b.SocketPath(), 0o666); err != nil {
		t.Fatal(err)
	}
	r := testkit.RunHelper(t, 65534, 65534, "ttrpc-connect", b.Address)
	// 1, not 3: the connection was made (the socket's mode let it through) and then refused.
	if r.Code != 1 {
		t.Fatalf("a client running as nobody: exit %d, want 1 (connected, then refused); stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := testkit.RunHelper(t, 0, 0, "ttrpc-connect", b.Address); r.Code != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(pid) {
		t.Errorf("the same helper as root: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
}

// plant puts a symlink at each of names in dir, each to its own file outside dir holding
// "victim", and returns the victims.
func plant(t *testing.T, dir string, names ...string) map[string]string {
	t.Helper()
	outside := testkit.TempDir(t)
	victims := map[string]string{}
	for _, name := range names {
		victim := filepath.Join(outside, name)
		if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		victims[name] = victim
	}
	return victims
}

// untouched checks that no victim was written through its link.
func untouched(t *testing.T, victims map[string]string) {
	t.Helper()
	for name, victim := range victims {
		if data, err := os.ReadFile(victim); err != nil || string(data) != "victim" {
			t.Errorf("%s was written through the symlink %s: %q, %v", victim, name, data, err)
		}
	}
}

// TestBundleFilesNotWrittenThroughSymlinks: the files the start action and the long-lived shim
// write in the bundle (address, shim.pid, shim.log) replace a symlink planted there instead of
// writing through it.
func TestBundleFilesNotWrittenThroughSymlinks(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	victims := plant(t, c.dir, bundle.AddressFile, bundle.ShimPidFile, bundle.ShimLogFile, bundle.AddressFile+".tmp", bundle.ShimPidFile+".tmp")
	b, pid := c.started(c.run(nil, nil, c.args("links", "start")...))
	untouched(t, victims)
	for _, name := range []string{bundle.AddressFile, bundle.ShimPidFile, bundle.ShimLogFile} {
		st, err := os.Lstat(filepath.Join(c.dir, name))
		if err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s in the bundle: %v, %v; want the shim's own regular file", name, st, err)
		}
	}
	if addr, _ := os.ReadFile(filepath.Join(c.dir, bundle.AddressFile)); string(addr) != b.Address {
		t.Errorf("address holds %q, want %q", addr, b.Address)
	}
	if got, _ := bundle.ReadPidFile(filepath.Join(c.dir, bundle.ShimPidFile)); got != pid {
		t.Errorf("shim.pid holds %d, want %d", got, pid)
	}
}

// TestTaskFilesNotWrittenThroughSymlinks: the files a task's life writes in its bundle
// (options.json, runc's init.pid and log.json, exit.json) replace a planted symlink too.
func TestTaskFilesNotWrittenThroughSymlinks(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "links", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 3"}, NullIO: true})
	victims := plant(t, k.Bundle, bundle.OptionsFile, bundle.InitPidFile, bundle.RuncLogFile, bundle.ExitFile, bundle.ExitFile+".tmp", bundle.OptionsFile+".tmp")
	pid := k.Run()
	if w := waitExec(t, k, ""); w.ExitStatus != 3 {
		t.Errorf("the task exited %d, want 3", w.ExitStatus)
	}
	untouched(t, victims)
	if got, _ := bundle.ReadPidFile(filepath.Join(k.Bundle, bundle.InitPidFile)); got != pid {
		t.Errorf("init.pid holds %d, want %d", got, pid)
	}
	x := testkit.WaitExitRecord(t, k.Bundle)
	if x.Pid != pid || x.ExitStatus != 3 {
		t.Errorf("exit.json = %+v, want pid %d, status 3", x, pid)
	}
	for _, name := range []string{bundle.OptionsFile, bundle.InitPidFile, bundle.RuncLogFile, bundle.ExitFile} {
		if st, err := os.Lstat(filepath.Join(k.Bundle, name)); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s in the bundle: %v, %v; want a regular file", name, st, err)
		}
	}
}

// TestDeleteRemovesOnlySockets: the delete action removes the socket the bundle's address file
// names when nobody listens on it. An address file naming any other file (connecting to which
// is refused just the same) must not make root remove that file.
func TestDeleteRemovesOnlySockets(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	victim := filepath.Join(testkit.TempDir(t), "victim")
	if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, bundle.AddressFile), []byte("unix://"+victim), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.run(nil, nil, c.args("gone", "delete")...)
	if r.Code != 0 {
		t.Fatalf("delete: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "victim" {
		t.Errorf("the file the address named is gone or changed: %q, %v", data, err)
	}
}
