// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoWith makes a repository root whose scripts/containerd2.sh is script.
func repoWith(t *testing.T, script string) string {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scripts", "containerd2.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestContainerdVersionsFromTheScript(t *testing.T) {
	t.Setenv("SHIMWALK_CACHE", "/cache")
	root := repoWith(t, "#!/bin/bash\nCONTAINERD_VERSIONS=(v1.7.35 v2.2.9  v2.4.2)\n\nCONTAINERD2_VERSION=v2.4.2\n")
	versions, err := ContainerdVersions(root)
	if err != nil || !slices.Equal(versions, []string{"v1.7.35", "v2.2.9", "v2.4.2"}) {
		t.Errorf("ContainerdVersions = %q, %v", versions, err)
	}
	if version, err := Containerd2Version(root); err != nil || version != "v2.4.2" {
		t.Errorf("Containerd2Version = %q, %v", version, err)
	}
	if bin := containerdDir("v2.4.2"); bin != "/cache/containerd-v2.4.2/bin" {
		t.Errorf("containerdDir = %q", bin)
	}
}

// TestContainerdVersionsRefuseWhatIsNoVersion: each version becomes a directory name, so a
// word that is no release tag is an error that names the script and the word.
func TestContainerdVersionsRefuseWhatIsNoVersion(t *testing.T) {
	for _, tc := range []struct{ script, want string }{
		{"CONTAINERD_VERSIONS=(v1.7.35 ../etc)\n", `"../etc" is no containerd version`},
		{"CONTAINERD_VERSIONS=(v1.7.35\n v2.4.2)\n", "does not close on its line"},
		{"CONTAINERD_VERSIONS=()\n", "sets no CONTAINERD_VERSIONS"},
		{"# nothing here\n", "sets no CONTAINERD_VERSIONS"},
	} {
		_, err := ContainerdVersions(repoWith(t, tc.script))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "containerd2.sh") {
			t.Errorf("script %q: err %v, want one naming the script and saying %q", tc.script, err, tc.want)
		}
	}
	if _, err := Containerd2Version(repoWith(t, "CONTAINERD2_VERSION=(v2.2.9 v2.4.2)\n")); err == nil {
		t.Errorf("Containerd2Version took two versions")
	}
}

// TestReleaseConfig: each generation gets its own config schema and plugin list, a built release
// the PATH that makes containerd find its own runc shim first, and a release that is not there
// is a *MissingError that says what installs it.
func TestReleaseConfig(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("SHIMWALK_CACHE", cache)
	for _, v := range []string{"v1.7.35", "v2.4.2"} {
		var missing *MissingError
		if _, err := ReleaseConfig(v); !errors.As(err, &missing) || !strings.Contains(err.Error(), "scripts/containerd2.sh "+v) {
			t.Errorf("ReleaseConfig(%s) before it is built: %v, want a MissingError naming the script", v, err)
		}
		bin := filepath.Join(cache, "containerd-"+v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"containerd", "ctr"} {
			if err := os.WriteFile(filepath.Join(bin, name), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		version  string
		schema   int
		disabled []string
	}{
		{"v1.7.35", 2, disabled17},
		{"v2.4.2", 3, disabled2},
	} {
		cfg, err := ReleaseConfig(tc.version)
		bin := filepath.Join(cache, "containerd-"+tc.version, "bin")
		if err != nil || cfg.Binary != filepath.Join(bin, "containerd") || cfg.Ctr != filepath.Join(bin, "ctr") {
			t.Errorf("ReleaseConfig(%s) = %+v, %v; want the binaries in %s", tc.version, cfg, err, bin)
			continue
		}
		if cfg.ConfigVersion != tc.schema || !slices.Equal(cfg.Disabled, tc.disabled) {
			t.Errorf("ReleaseConfig(%s): config version %d, disabled %q; want %d, %q", tc.version, cfg.ConfigVersion, cfg.Disabled, tc.schema, tc.disabled)
		}
		if len(cfg.Env) != 1 || !strings.HasPrefix(cfg.Env[0], "PATH="+bin+string(os.PathListSeparator)) {
			t.Errorf("ReleaseConfig(%s).Env = %q, want PATH starting with %s", tc.version, cfg.Env, bin)
		}
	}

	// Debian's is found in PATH.
	path := t.TempDir()
	t.Setenv("PATH", path)
	var missing *MissingError
	if _, err := ReleaseConfig(""); !errors.As(err, &missing) || !strings.Contains(err.Error(), "scripts/deps.sh") {
		t.Errorf("ReleaseConfig(\"\") without containerd in PATH: %v, want a MissingError naming scripts/deps.sh", err)
	}
	for _, name := range []string{"containerd", "ctr"} {
		if err := os.WriteFile(filepath.Join(path, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := ReleaseConfig("")
	if err != nil || cfg.Binary != filepath.Join(path, "containerd") || cfg.Ctr != filepath.Join(path, "ctr") ||
		cfg.ConfigVersion != 2 || !slices.Equal(cfg.Disabled, disabled16) || cfg.Env != nil {
		t.Errorf("ReleaseConfig(\"\") = %+v, %v; want 1.6's from %s", cfg, err, path)
	}
}

// TestStopLeavesASharedNamespacesCgroups: a private containerd on a namespace it shares with the
// host ("k8s.io" on a Kubernetes node) removes, when it stops, the empty cgroups of that
// namespace it made and none of those that were there before it started.
func TestStopLeavesASharedNamespacesCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("requirement missing in CI: these tests run as root")
		}
		t.Skip("cgroups are root's")
	}
	// A hierarchy to make cgroups in: the v2 root, or on a v1 (or hybrid) host the pids one.
	hier := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(hier, "cgroup.procs")); err != nil {
		hier = "/sys/fs/cgroup/pids"
	}
	ns := fmt.Sprintf("shimwalk-drivertest-%d", os.Getpid())
	nodes := filepath.Join(hier, ns, "node-pod")
	if err := os.MkdirAll(nodes, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveCgroups(ns) })

	// containerd is stood in for by a process that waits for Stop's SIGTERM, ctr by true: Stop's
	// cgroup removal is what is tested.
	dir := t.TempDir()
	bin := filepath.Join(dir, "containerd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctr, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartContainerd(ContainerdConfig{Dir: filepath.Join(dir, "ctd"), Namespace: ns, Binary: bin, Ctr: ctr,
		RuncRoot: filepath.Join(dir, "runc"), ConfigVersion: 3, SharedNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(hier, ns, "lab", "pod")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	c.Stop()
	if _, err := os.Stat(nodes); err != nil {
		t.Errorf("the node's cgroup %s, there before containerd started, was removed: %v", nodes, err)
	}
	if _, err := os.Stat(filepath.Dir(mine)); !os.IsNotExist(err) {
		t.Errorf("containerd's own cgroup %s is still there: %v", filepath.Dir(mine), err)
	}
}
