// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"os"
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
	version, bin, err := Containerd2Dir(root)
	if err != nil || version != "v2.4.2" || bin != "/cache/containerd-v2.4.2/bin" {
		t.Errorf("Containerd2Dir = %q, %q, %v", version, bin, err)
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
	if _, _, err := Containerd2Dir(repoWith(t, "CONTAINERD2_VERSION=(v2.2.9 v2.4.2)\n")); err == nil {
		t.Errorf("Containerd2Dir took two versions")
	}
}
