// SPDX-License-Identifier: Apache-2.0

// The start helper's socket: its name (CreateSocketAddress in containerd's pkg/shim), its
// directory, what a failed start leaves, and the OOM score of the shim it starts
// (AdjustOOMScore).
package shimtest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// referenceAddress is the address containerd's runc shim derives for a shim of containerd
// address, namespace and group, in dir.
func referenceAddress(dir, address, namespace, group string) string {
	sum := sha256.Sum256([]byte(filepath.Join(address, namespace, group)))
	return "unix://" + filepath.Join(dir, hex.EncodeToString(sum[:]))
}

// TestSocketNamedByContainerdAddress: two containerds sharing a socket directory (their runc
// roots apart) start a shim for the same namespace and id: each gets a shim of its own, named
// as containerd's runc shim names it, from containerd's address too.
func TestSocketNamedByContainerdAddress(t *testing.T) {
	t.Parallel()
	first, second := newCLI(t), newCLI(t)
	second.sockets = first.sockets
	b1, pid1 := first.started(first.run(nil, nil, first.args("same", "start")...))
	if want := referenceAddress(first.sockets, first.address, "test", "same"); b1.Address != want {
		t.Errorf("address %s, want %s", b1.Address, want)
	}
	// The second containerd is of the 2.3+ generation: its address comes in BootstrapParams.
	params := &bootapi.BootstrapParams{InstanceID: "same", Namespace: "test", ContainerdGrpcAddress: second.address}
	r := second.run(marshal(t, params), nil, second.args("same", "start")...)
	b2, pid2 := second.started(r)
	var result bootapi.BootstrapResult
	if err := proto.Unmarshal([]byte(r.Stdout), &result); err != nil {
		t.Fatalf("stdout %q is not a BootstrapResult: %v", r.Stdout, err)
	}
	if want := referenceAddress(first.sockets, second.address, "test", "same"); b2.Address != want {
		t.Errorf("address %s, want %s", b2.Address, want)
	}
	if pid1 == pid2 || b1.Address == b2.Address {
		t.Errorf("both containerds got shim %d at %s: one containerd's shim serves the other's tasks", pid2, b2.Address)
	}
}

// mode is the permission bits and owner of path, not following a symlink.
func mode(t *testing.T, path string) (os.FileMode, uint32) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode(), st.Sys().(*syscall.Stat_t).Uid
}

// TestSocketDirectory: the start helper creates what is missing of the socket directory 0700,
// changes nothing that exists, and refuses a directory that is a symlink or another user's,
// where that user could have put a socket of theirs at the name containerd will dial.
func TestSocketDirectory(t *testing.T) {
	t.Parallel()

	t.Run("missing directories are created 0700", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		top := filepath.Join(testkit.TempDir(t), "a")
		c.sockets = filepath.Join(top, "b", "s")
		b, _ := c.started(c.run(nil, nil, c.args("mk", "start")...))
		if filepath.Dir(b.SocketPath()) != c.sockets {
			t.Fatalf("address %s is not in %s", b.Address, c.sockets)
		}
		for _, p := range []string{top, filepath.Dir(c.sockets), c.sockets} {
			if m, uid := mode(t, p); !m.IsDir() || m.Perm() != 0o700 || uid != 0 {
				t.Errorf("%s: %v, uid %d; want a 0700 directory of root's", p, m, uid)
			}
		}
	})

	t.Run("an existing directory is left as it is", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		// Shared, as /tmp or containerd's own socket_dir would be.
		c.sockets = testkit.TempDir(t)
		if err := os.Chmod(c.sockets, os.ModeSticky|0o777); err != nil {
			t.Fatal(err)
		}
		b, _ := c.started(c.run(nil, nil, c.args("keep", "start")...))
		if m, _ := mode(t, c.sockets); m.Perm() != 0o777 || m&os.ModeSticky == 0 {
			t.Errorf("the socket directory is %v after the start, was drwxrwxrwt", m)
		}
		if m, uid := mode(t, b.SocketPath()); m.Perm() != 0o600 || uid != 0 {
			t.Errorf("socket %s: %v, uid %d; want 0600, root's", b.SocketPath(), m, uid)
		}
	})

	refused := func(t *testing.T, c *cli, want string) {
		t.Helper()
		r := c.run(nil, nil, c.args("bad", "start")...)
		if r.Code == 0 || r.Stdout != "" || !strings.Contains(r.Stderr, want) || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("start: exit %d, stdout %q, stderr %q; want a failure that says %q", r.Code, r.Stdout, r.Stderr, want)
		}
		for _, name := range []string{bundle.ShimPidFile, bundle.AddressFile} {
			if _, err := os.Lstat(filepath.Join(c.dir, name)); err == nil {
				t.Errorf("a refused start wrote %s", name)
			}
		}
	}

	t.Run("a symlink is refused", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		target := testkit.TempDir(t)
		c.sockets = filepath.Join(testkit.TempDir(t), "s")
		if err := os.Symlink(target, c.sockets); err != nil {
			t.Fatal(err)
		}
		refused(t, c, "is a symlink")
		if entries, _ := os.ReadDir(target); len(entries) > 0 {
			t.Errorf("the symlink's target got %d entries", len(entries))
		}
	})

	t.Run("another user's directory is refused", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		c.sockets = filepath.Join(testkit.TempDir(t), "s")
		if err := os.Mkdir(c.sockets, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(c.sockets, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused(t, c, "belongs to uid 65534")
		if entries, _ := os.ReadDir(c.sockets); len(entries) > 0 {
			t.Errorf("the foreign directory got %d entries", len(entries))
		}
	})
}

// TestFailedStartLeavesNoShim: when the start helper cannot record the shim it started
// (shim.pid, address), it fails, and neither that shim nor its socket lives on: containerd
// never learns of them and would never send Shutdown.
func TestFailedStartLeavesNoShim(t *testing.T) {
	t.Parallel()
	for _, name := range []string{bundle.ShimPidFile, bundle.AddressFile} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			// A directory that is not empty: no rename replaces it.
			if err := os.MkdirAll(filepath.Join(c.dir, name, "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			r := c.run(nil, nil, c.args("rec", "start")...)
			if r.Code == 0 || r.Stdout != "" || !strings.Contains(r.Stderr, name) {
				t.Errorf("start: exit %d, stdout %q, stderr %q; want a failure naming %s", r.Code, r.Stdout, r.Stderr, name)
			}
			if entries, _ := os.ReadDir(c.sockets); len(entries) > 0 {
				t.Errorf("the failed start left %s in the socket directory", entries[0].Name())
			}
			for _, other := range []string{bundle.ShimPidFile, bundle.AddressFile} {
				if st, err := os.Lstat(filepath.Join(c.dir, other)); other != name && err == nil {
					t.Errorf("the failed start left %s (%v) naming a shim it killed", other, st.Mode())
				}
			}
			if pids := processesWithArg(c.address); len(pids) > 0 {
				t.Errorf("the failed start left shim %v running", pids)
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// TestShimOOMScore: the long-lived shim's oom_score_adj is its caller's (containerd's) plus
// one, at most the kernel's 1000, so that under memory pressure the kernel kills a shim before
// containerd, as with containerd's runc shim.
func TestShimOOMScore(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	// Lowering a score takes CAP_SYS_RESOURCE, which a container may lack: the callers' scores
	// are ours or higher.
	own, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []int{own, max(own, 500), 999, 1000} {
		want := min(caller+1, 1000)
		t.Run(strconv.Itoa(caller), func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			// A shell with the score stands for containerd: the helper is its child, not
			// exec'd in its place, so that the helper's parent is the shell.
			shim := c.bin
			c.bin = "/bin/sh"
			script := `echo ` + strconv.Itoa(caller) + ` > /proc/$$/oom_score_adj || exit 99; "$0" "$@"; exit $?`
			_, pid := c.started(c.run(nil, nil, append([]string{"-c", script, shim}, c.args("oom", "start")...)...))
			data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/oom_score_adj")
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := strconv.Atoi(strings.TrimSpace(string(data))); got != want {
				t.Errorf("the shim's oom_score_adj is %d with a caller's %d, want %d", got, caller, want)
			}
		})
	}
}
