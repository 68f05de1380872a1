// SPDX-License-Identifier: Apache-2.0

package stdio

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
)

// TestConsoleOutputSchemes: a terminal's output goes to a FIFO or a logging binary; a file://
// URI, which containerd's shim does not take for a terminal either, is refused as invalid
// before runc runs.
func TestConsoleOutputSchemes(t *testing.T) {
	m := &cmdMonitor{ended: make(chan *os.ProcessState, 1)}
	file := "file://" + filepath.Join(t.TempDir(), "log")
	if _, err := NewConsole(Config{Terminal: true, Stdout: file}, "id", "ns", m); !errdefs.IsInvalidArgument(err) {
		t.Errorf("NewConsole with %s: %v, want InvalidArgument", file, err)
	}
	if _, err := NewConsole(Config{Terminal: true, Stdout: "binary-v2:///nonexistent/logger"}, "id", "ns", m); err == nil {
		t.Error("NewConsole with a logging binary that does not exist succeeded")
	}
}

// TestConsoleLoggerWithoutAttach: a terminal whose logging binary was started but whose
// process never ran (runc failed) still ends the logger on Close: it sees EOF and exits.
func TestConsoleLoggerWithoutAttach(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(t.TempDir(), "env")
	m := &cmdMonitor{ended: make(chan *os.ProcessState, 1)}
	c, err := NewConsole(Config{Terminal: true, Stdout: "binary://" + self + "?" + loggerFlag + "=env:" + envFile}, "exec-id", "ns", m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case st := <-m.ended:
		if !st.Success() {
			t.Errorf("the logging binary ended with %v, want its own exit at EOF", st)
		}
	default:
		t.Error("Close returned while the logging binary still ran")
		m.exit(t)
	}
}
