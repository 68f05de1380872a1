// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestMountsUnderInUnescapes: mountinfo escapes a space in a mount point as \040 and a backslash
// as \134; the mount points listed are the paths themselves, at or below dir and nowhere else, and
// an escape cut short by the end of the field is kept as it is.
func TestMountsUnderInUnescapes(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	lines := "" +
		"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		"2 1 0:5 / /run/test rw - tmpfs tmpfs rw\n" +
		`3 2 0:6 / /run/test/a\040b rw - tmpfs tmpfs rw` + "\n" +
		`4 2 0:7 / /run/test/x\134y rw - tmpfs tmpfs rw` + "\n" +
		`5 2 0:8 / /run/test/trailing\04 rw - tmpfs tmpfs rw` + "\n" +
		"6 1 0:9 / /run/testing rw - tmpfs tmpfs rw\n"
	if err := os.WriteFile(info, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := MountsUnderIn(info, "/run/test")
	want := []string{"/run/test", "/run/test/a b", `/run/test/x\y`, `/run/test/trailing\04`}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("MountsUnderIn = %q, %v; want %q", got, err, want)
	}
}
